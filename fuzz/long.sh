#!/bin/bash
# fuzz/long.sh FUZZER RUNS JOBS DIR CORPUS — make fuzz-long's campaign.
#
# JOBS fuzzers side by side, RUNS executions in all, sharing DIR/new for the
# inputs they find (each reloads the others'); the corpus is only read.
# Findings (crash-*, timeout-*, oom-*, leak-*) land in DIR.  Exits non-zero
# if any job found something or did not finish; prints the executions each
# job made and their sum, from libFuzzer's own final statistics.
set -u
fuzzer=$1 runs=$2 jobs=$3 dir=$4 corpus=$5
mkdir -p "$dir/new"
per=$(( (runs + jobs - 1) / jobs ))
echo "fuzz-long: $jobs jobs x $per executions, $(date -u '+%F %T') UTC, logs in $dir/job-*.log"
pids=()
for i in $(seq 1 "$jobs"); do
	( cd "$dir" && exec nice -n 19 "$fuzzer" -runs="$per" -timeout=20 -rss_limit_mb=2048 -max_len=512 \
		-print_final_stats=1 -reload=1 -artifact_prefix=./ new "$corpus" ) > "$dir/job-$i.log" 2>&1 &
	pids+=($!)
done
failed=0
for i in "${!pids[@]}"; do
	wait "${pids[$i]}" || { echo "fuzz-long: job $((i + 1)) exited with $?"; failed=1; }
done
total=0
for i in $(seq 1 "$jobs"); do
	n=$(sed -n 's/^stat::number_of_executed_units: *//p' "$dir/job-$i.log")
	echo "fuzz-long: job $i: ${n:-no final statistics} executions; $(grep -E '^#[0-9]+' "$dir/job-$i.log" | tail -1)"
	total=$((total + ${n:-0}))
done
findings=$(cd "$dir" && ls -d crash-* timeout-* oom-* leak-* 2>/dev/null)
echo "fuzz-long: $total executions in all, $(date -u '+%F %T') UTC; findings: ${findings:-none}"
[ -z "$findings" ] && [ "$failed" = 0 ]
