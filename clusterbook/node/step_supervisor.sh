#!/bin/bash
# clusterbook's step supervisor: the body of every SLURM tier job. It starts the tier's steps (RPC workers first, the
# head last), registers the endpoint once /health answers, starts an ended step again inside the job (the allocation
# is kept), and stops the steps in order when SLURM ends the job. The job script clusterbook writes sets the
# configuration and defines step_0 .. step_HEAD (each one start_worker or start_server call), then includes this
# file, which runs `supervise`; sourced (by a test) it only defines its functions.
#
# Configuration (set by the job script): TIER, RECORD (the endpoint record; its folder is REGISTRY), HTTP_ADDR,
# HTTP_PORT, GRACE (SLURM's preemption grace, s), REQUEUE (1: scontrol requeue on giving up), STEP_RESTARTS (restarts
# in a row before giving up), HEAD (the head's step index), WORKERS (worker step indexes), ENDPOINTS (each worker's
# host:port), RPC_PORT, CPUS (per step), STEP_LOG (each step's log path, without "-NAME.log").
# shellcheck disable=SC2154  # the configuration comes from the job script that includes this file
: "${BACKOFF_S:=5}"  # seconds between restarts grow by this much: 0, 5, 10 (a node going down has time to leave)
: "${LISTEN_S:=30}"  # how long a worker may take to listen
: "${SIGNAL_WAIT_S:=5}"  # a step SIGTERM ended while SLURM cannot be asked: wait this long for the job's own signal

pids=()
names=()
step_nodes=()
restarts=0
JOB_STARTED=$(date +%s)

stop_steps() {
    # Preemption sends SIGTERM and SIGKILL after the grace time: stop everything well before that, the head first
    # (a head whose workers vanish under it aborts), then the workers. SLURM signals every step at once too, and
    # may end this script at once: the worker guard keeps the order on the workers' side.
    trap '' TERM INT  # a second signal (scancel after a preemption's) must not cut the stop short
    trap - EXIT
    rm -f "$RECORD"
    stop_step "$HEAD" $(((GRACE - 5) / 2))
    local pid deadline=$((SECONDS + (GRACE - 5) / 2))
    for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    while [ "$SECONDS" -lt "$deadline" ]; do
        local alive=0
        for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
        [ "$alive" = 0 ] && break
        sleep 0.2
    done
    for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
    echo "$TIER: ${#WORKERS[@]} worker step(s) stopped after the head"
}

stop_step() { # index seconds: SIGTERM to one step (srun passes it on), SIGKILL if it is still there after that long
    local pid=${pids[$1]:-} deadline=$((SECONDS + $2)) status
    [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null || return 0
    while kill -0 "$pid" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.2; done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null
    status=$?
    echo "$TIER: ${names[$1]} stopped (exit status $status)"
}

start_step() { # index name node command...: one step, its output in a file of its own (invoke logs shows each)
    local i=$1 name=$2 node=$3
    shift 3
    srun --nodes=1 --ntasks=1 --cpus-per-task="$CPUS" --nodelist="$node" --kill-on-bad-exit=1 --open-mode=append \
        --output="$STEP_LOG-$name.log" "$@" &
    pids[i]=$!
    names[i]=$name
    step_nodes[i]=$node
    echo "$TIER: started $name on $node (pid $!)"
}

# The server step runs under this guard. SLURM sends SIGTERM to the step (scancel, preemption, stop_step). Idle,
# llama-server stops at once; with a request in flight it waits for that request, and its job being cancelled, no
# scancel reaches the step again: it stayed until SLURM's KillWait (30 s), the job COMPLETING all that time. A second
# SIGTERM makes llama-server exit at once: the guard gives it a second to stop, then sends one (two, a second apart,
# where SLURM's signal reached only the guard).
# shellcheck disable=SC2016  # a program for bash -c: it expands on the server's node
SERVER_GUARD='server=
stop_server() {
    for _ in 1 2; do
        for _ in 1 2 3 4 5; do kill -0 "$server" 2>/dev/null || break 2; sleep 0.2; done
        kill -TERM "$server" 2>/dev/null
    done
    wait "$server"
    exit 143
}
trap stop_server TERM
"$@" &
server=$!
wait "$server"'

# Each RPC worker step runs under this guard. SLURM sends SIGTERM to every step of the job at once (scancel,
# preemption), and a head whose workers vanish under it aborts: the worker ignores the signal, and the guard stops it
# once its head has closed the connection (5 s at most).
# shellcheck disable=SC2016  # a program for bash -c: it expands on the worker's node
WORKER_GUARD='port=$1; shift
worker=
head_connected() { ss -Htn state established "( sport = :$port )" | grep -q .; }
stop_worker() {
    if [ -n "$worker" ]; then
        for _ in 1 2 3 4 5 6 7 8 9 10; do head_connected || break; sleep 0.5; done
        kill -KILL "$worker"
        wait "$worker"
    fi
    exit 143
}
trap stop_worker TERM
(trap "" TERM; exec "$@") &
worker=$!
wait "$worker"'

start_worker() { # index name node command...: an RPC worker step under its guard
    local i=$1 name=$2 node=$3
    shift 3
    start_step "$i" "$name" "$node" bash -c "$WORKER_GUARD" "$name" "$RPC_PORT" "$@"
}

start_server() { # index name node command...: the head (or the router) step under its guard
    local i=$1 name=$2 node=$3
    shift 3
    start_step "$i" "$name" "$node" bash -c "$SERVER_GUARD" "$name" "$@"
}

wait_workers() { # until every worker's port answers; fails, with ENDED set, when a worker ends or stays silent
    # RPC workers accept TCP until the head connects, so a port probe is right here, before the head starts, and only
    # here.
    local w deadline
    for w in "${WORKERS[@]}"; do
        deadline=$((SECONDS + LISTEN_S))
        until (echo >"/dev/tcp/${ENDPOINTS[$w]%:*}/${ENDPOINTS[$w]#*:}") 2>/dev/null; do
            give_up_if_lost "${step_nodes[$w]}"
            if ! kill -0 "${pids[$w]}" 2>/dev/null || [ "$SECONDS" -ge "$deadline" ]; then
                echo "$TIER: ${names[$w]} does not listen at ${ENDPOINTS[$w]}" >&2
                stop_step "$w" 5
                ENDED=$w
                return 1
            fi
            sleep 1
        done
    done
}

ended_step() { # the index of a step that has ended, if one has
    local i
    for i in "${!pids[@]}"; do kill -0 "${pids[$i]}" 2>/dev/null || { echo "$i"; return 0; }; done
    return 1
}

wait_healthy() { # until the head answers /health; fails, with ENDED set, when a step ends first
    until curl -sf -o /dev/null "http://$HTTP_ADDR:$HTTP_PORT/health"; do
        ENDED=$(ended_step) && return 1
        sleep 0.5
    done
}

give_up() { # why: stop every step and leave the job to SLURM's requeue (or the keeper)
    echo "$TIER: $1; stopping the job" >&2
    stop_steps
    if [ "$REQUEUE" = 1 ] && [ -n "${SLURM_JOB_ID:-}" ]; then
        scontrol requeue "$SLURM_JOB_ID"
    fi
    exit 1
}

node_lost() { # node: whether SLURM says it is down or its slurmd started after this job did (a reboot ends steps)
    local shown start
    shown=$(scontrol show node -o "$1" 2>/dev/null) || return 1  # cannot tell: try the restart
    case "$shown" in
        *State=*DOWN* | *State=*NOT_RESPONDING* | *State=*REBOOT* | *State=*FAIL*) return 0 ;;
    esac
    start=$(sed -n 's/.*SlurmdStartTime=\([^ ]*\).*/\1/p' <<<"$shown")
    [ -n "$start" ] && [ "$(date -d "$start" +%s 2>/dev/null || echo 0)" -gt "$JOB_STARTED" ]
}

give_up_if_lost() { # node: a step cannot start on a node that left or restarted; only a new allocation helps
    node_lost "$1" && give_up "$1 left or restarted since the job began"
    return 0
}

job_ending() { # 0: SLURM is ending this job (cancelled, preempted, out of time); 1: it is not; 2: SLURM cannot say
    local shown
    [ -n "${SLURM_JOB_ID:-}" ] || return 2
    shown=$(scontrol show job -o "$SLURM_JOB_ID" 2>/dev/null) || return 2
    [[ $shown == *JobState=RUNNING* ]] || return 0
    [[ $shown =~ PreemptTime=([^ ]+) ]] && [ "${BASH_REMATCH[1]}" != None ] && return 0
    return 1
}

restart_steps() { # index of the step that ended: start it again inside this job, which keeps its allocation
    local i=$1 status w ending
    while true; do
        wait "${pids[$i]}" 2>/dev/null
        status=$?
        echo "$TIER: ${names[$i]} ended (exit status $status)" >&2
        job_ending
        ending=$?
        if [ "$ending" = 0 ]; then
            # No crash: SLURM is ending the job. A preemption signals only the steps during its grace time (this
            # script gets SIGKILL at its end), so waiting for a signal of our own would hold the node that long from
            # the job that preempts us: stop the rest now, the head first, and leave.
            echo "$TIER: SLURM is ending job ${SLURM_JOB_ID:-}: ${names[$i]} is not restarted; stopping the rest now" >&2
            stop_steps
            exit 143
        elif [ "$ending" = 2 ] && [ "$status" = 143 ]; then
            echo "$TIER: ${names[$i]} was stopped by SIGTERM; waiting ${SIGNAL_WAIT_S} s for the job's own" >&2
            sleep "$SIGNAL_WAIT_S" &
            wait $!
        fi
        # bounded: a step that ends again before the tier is healthy counts on; health resets the count
        restarts=$((restarts + 1))
        [ "$restarts" -le "$STEP_RESTARTS" ] || give_up "${names[$i]} ended; $((restarts - 1)) restarts in a row did not bring the tier back"
        echo "$TIER: restart $restarts of $STEP_RESTARTS inside job ${SLURM_JOB_ID:-}: the head stops, every ended worker starts again, then the head"
        sleep $(((restarts - 1) * BACKOFF_S))
        stop_step "$HEAD" 10
        for w in "${WORKERS[@]}"; do
            kill -0 "${pids[$w]}" 2>/dev/null && continue
            give_up_if_lost "${step_nodes[$w]}"
            "step_$w"
        done
        if wait_workers; then
            "step_$HEAD"
            return 0
        fi
        i=$ENDED
    done
}

serve() { # [index of a step that ended]: start (or restart) what is not running until the tier answers /health
    if [ -n "${1:-}" ]; then
        restart_steps "$1"
    elif wait_workers; then
        "step_$HEAD"
    else
        restart_steps "$ENDED"
    fi
    until wait_healthy; do
        restart_steps "$ENDED"
    done
}

register() { # the endpoint record the gateway and the keeper read: written whole, then moved into place
    mkdir -p "$(dirname "$RECORD")"
    printf '{"tier": "%s", "host": "%s", "port": %s, "job_id": "%s", "nodes": "%s"}\n' \
        "$TIER" "$HTTP_ADDR" "$HTTP_PORT" "${SLURM_JOB_ID:-}" "${SLURM_JOB_NODELIST:-}" >"$RECORD.tmp"
    mv "$RECORD.tmp" "$RECORD"
    echo "$TIER: healthy; endpoint registered in $RECORD"
}

supervise() { # the job: workers, the head once they listen, the record once it answers, then watch the steps
    local w
    trap 'echo "$TIER: SIGTERM (preemption or scancel), shutting down"; stop_steps; exit 143' TERM INT
    trap stop_steps EXIT
    for w in "${WORKERS[@]}"; do "step_$w"; done
    echo "$TIER: waiting for http://$HTTP_ADDR:$HTTP_PORT/health"
    serve
    register
    # Watch the steps by process, not by TCP: a worker serving the head refuses new connections (seed 004). A step
    # that ends is started again inside the job (the endpoint stays registered; the gateway holds requests meanwhile).
    while true; do
        if ENDED=$(ended_step); then
            serve "$ENDED"
            echo "$TIER: healthy again after restart $restarts"
            restarts=0
        fi
        sleep 1 &
        wait $!
    done
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    supervise
fi
