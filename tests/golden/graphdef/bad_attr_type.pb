

xPlaceholder*
dtype0
'
mMatMulxx*
transpose_ayes