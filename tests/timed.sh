#!/bin/sh
# Wall time of each launch of `make test`.
#
#   tests/timed.sh start              forget earlier times; the clock of the whole run starts now
#   tests/timed.sh LABEL COMMAND...   run COMMAND, print its wall time, note it (exit: COMMAND's)
#   tests/timed.sh summary            one line: every launch's time, then the whole run's
#
# The notes go to $TEST_TIMES (default build/test-times).
times=${TEST_TIMES:-build/test-times}
clock() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }

case $1 in
start)
    mkdir -p "$(dirname "$times")"
    date +%s > "$times.start"
    : > "$times"
    ;;
summary)
    [ -s "$times" ] || { echo "make test: no launch timed"; exit 0; }
    line=$(while IFS='	' read -r label secs; do printf '%s %s, ' "$label" "$(clock "$secs")"; done < "$times")
    if [ -s "$times.start" ]; then
        line="${line}all $(clock $(( $(date +%s) - $(cat "$times.start") ))) with the build"
    else
        line=${line%, }
    fi
    echo "make test: $line"
    ;;
*)
    label=$1
    shift
    begin=$(date +%s)
    "$@"
    status=$?
    secs=$(( $(date +%s) - begin ))
    if [ $status -eq 0 ]; then
        echo "== $label: $(clock $secs)"
    else
        echo "== $label: $(clock $secs), failed (exit status $status)"
    fi
    mkdir -p "$(dirname "$times")"
    printf '%s\t%s\n' "$label" "$secs" >> "$times"
    exit $status
    ;;
esac
