# shellcheck shell=bash
# Sourced by test.sh and test-clients.sh: cpu_seconds reads the output of
# bash's times (run in the shell whose children are counted, not in $(...),
# which is a fork of its own) and prints the user and system CPU seconds of
# that shell's waited-for children, its second line.
cpu_seconds() {
	tail -n 1 | awk '{
		total = 0
		for (i = 1; i <= 2; i++) { split($i, t, /[ms]/); total += t[1] * 60 + t[2] }
		printf "%d", total
	}'
}
