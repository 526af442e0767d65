

xPlaceholder*
dtype0
,
predConst*
dtype0
*
valueB
Z

swSwitchxpred

mgMergeswsw:1