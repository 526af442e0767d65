

xPlaceholder*
dtype0

pAddV2xq

qTanhp