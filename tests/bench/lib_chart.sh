#!/bin/bash
# Draw the benchmark table as a PNG (gnuplot): one bar per workload, its ratio
# shardfs/baseline on a log scale (green: goal met, red: not met, grey: no goal,
# blue: reference rows), the goal as a black vertical tick, the ratio written inside the bar, 1.0 as a dashed line.
#   bash tests/bench/lib_chart.sh results.dat results.png
set -eu
dat=$1 png=$2
n=$(wc -l <"$dat")
h=$((220 + 26 * n))
gnuplot <<EOF2
set terminal pngcairo noenhanced size 1500,$h font "DejaVu Sans,10"
set output "$png"
set datafile separator "\t"
set title "shardfs benchmark: ratio shardfs / baseline (log scale; bar reaching the black tick = goal met; green met, red not, blue reference)"
set logscale x 10
set xrange [0.01:*]
set yrange [$n:-1]
set ytics scale 0 font ",9"
set grid xtics
set format x "%g"
set xlabel "ratio (shardfs / baseline)"
set key bottom right
set style fill solid 0.85 border -1
set lmargin 82
set arrow from 1, graph 0 to 1, graph 1 nohead dt 2 lc rgb "#444444"
col(m) = m == 1 ? 0x2ca02c : m == 0 ? 0xd62728 : m == -1 ? 0x1f77b4 : 0x999999
plot "$dat" using (\$2/2):1:(0.01):(\$2):(\$1-0.35):(\$1+0.35):(col(\$4)):ytic(5) \
       with boxxyerror lc rgb variable notitle, \
     "" using (0.0105):1:(sprintf("%.2f", \$2)) with labels left font ",8" tc rgb "white" notitle, \
     "" using 3:(\$1-0.45):(0):(0.9) with vectors nohead lw 3 lc rgb "black" title "goal"
EOF2
