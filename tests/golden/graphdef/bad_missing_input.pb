

xPlaceholder*
dtype0

tTanh	nowhere:0