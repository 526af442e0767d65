

sPlaceholder*
dtype0