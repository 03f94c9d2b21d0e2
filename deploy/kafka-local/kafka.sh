#!/usr/bin/env bash
# shellcheck disable=SC2016 # inner `bash -c` scripts are single-quoted on purpose ($0/$@ args)
# kafka.sh: a throw-away single-node Apache Kafka 4.x broker (KRaft, broker+controller in
# one JVM) on 127.0.0.1, run from the jars on Maven Central. No Docker, no tarball.
#
#   kafka.sh start    format fresh storage, start the broker, wait until it answers
#   kafka.sh stop     stop it (TERM, then KILL), wait until the port is free; idempotent
#   kafka.sh status   exit 0 if running and answering, 1 if running but not answering,
#                     3 if not running
#
# Environment:
#   KAFKA_PORT             client (PLAINTEXT) port, default 9092
#   KAFKA_CONTROLLER_PORT  KRaft controller port, default KAFKA_PORT+1
#   KAFKA_DIR              run directory (config, data, logs, pid), default
#                          /tmp/ferry-kafka-$KAFKA_PORT; stop/status need the same value
#   KAFKA_KEEP_DATA=1      start on the existing storage instead of formatting afresh
#                          (broker-restart tests)
#   KAFKA_START_TIMEOUT    seconds to wait for the broker to answer, default 90
#   KAFKA_HEAP_OPTS        JVM heap flags, default "-Xms64m -Xmx512m"
#   KAFKA_CACHE_DIR        where the resolved classpath is cached, default
#                          ${XDG_CACHE_HOME:-~/.cache}/ferry-kafka
#   KAFKA_OWNER_PID        if set, a watchdog stops the broker once that process is gone
#                          (kafkatest sets it so a killed `go test` leaves no broker behind)
#   KAFKA_EXTRA_CONFIG     file appended to server.properties (a later key wins): extra
#                          listeners, TLS and SASL settings (kafkatest's secured broker)
#   KAFKA_FORMAT_ARGS      extra arguments of the storage format, one per line, such as
#                          --add-scram 'SCRAM-SHA-256=[name=ferry,password=...]'
#   KAFKA_CLUSTER_ID       cluster ID the storage is formatted with, default a random one;
#                          every node of a multi-node cluster needs the same
#   KAFKA_INITIAL_CONTROLLERS  the voters of a multi-node quorum (KIP-853), as
#                          id@host:port:directory-id,... ; formats with --initial-controllers
#                          instead of --standalone (kafkatest's three-broker cluster)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
self="$here/$(basename "${BASH_SOURCE[0]}")"
port=${KAFKA_PORT:-9092}
cport=${KAFKA_CONTROLLER_PORT:-$((port + 1))}
dir=${KAFKA_DIR:-/tmp/ferry-kafka-$port}
start_timeout=${KAFKA_START_TIMEOUT:-90}
cache=${KAFKA_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ferry-kafka}

# set_paths derives every path from $dir. The broker is recognised by the absolute path
# of its server.properties, so $dir is made absolute once it exists.
set_paths() {
	[[ -d $dir ]] && dir=$(cd "$dir" && pwd)
	data="$dir/data"
	logs="$dir/logs"
	log="$logs/server.log"
	pidfile="$dir/kafka.pid"
	watchfile="$dir/watchdog.pid"
	marker="$dir/.ferry-kafka"
}
set_paths

say() { echo "kafka.sh: $*" >&2; }
die() { say "$*"; exit 1; }

# now_us prints the wall clock in microseconds (EPOCHREALTIME needs bash 5).
now_us() { echo "${EPOCHREALTIME//[.,]/}"; }
# secs_since prints the seconds since a now_us value with one decimal.
secs_since() {
	local d=$((($(now_us) - $1) / 100000))
	printf '%d.%d' $((d / 10)) $((d % 10))
}

kafka_version() {
	sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$here/pom.xml" | head -n1
}

# alive reports whether pid is a running process. kill -0 alone also succeeds on a
# zombie, which an unreaped broker becomes when our parent is a subreaper.
alive() {
	[[ -n ${1:-} && -r /proc/$1/stat ]] || return 1
	local stat
	stat=$(</proc/"$1"/stat) || return 1
	stat=${stat##*) }
	[[ ${stat:0:1} != Z ]]
}

# is_broker reports whether pid is the broker of this run directory, so a stale pid
# file never makes us kill an unrelated process that got the same pid.
is_broker() {
	alive "${1:-}" || return 1
	local cmd
	cmd=$(tr '\0' ' ' </proc/"$1"/cmdline 2>/dev/null) || return 1
	[[ $cmd == *kafka.Kafka*"$dir/server.properties"* ]]
}

broker_pid() {
	local pid
	pid=$(cat "$pidfile" 2>/dev/null) || return 1
	is_broker "$pid" || return 1
	echo "$pid"
}

# listening reports whether something accepts TCP connections on 127.0.0.1:$1.
listening() {
	timeout 2 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$0"' "$1" 2>/dev/null
}

# probe sends a real Kafka Metadata v4 request (no topics) to 127.0.0.1:$1 and succeeds
# only if the answer lists at least one broker. An open port is not enough: the broker
# accepts connections before it has caught up with the controller, and it is listed in
# metadata only once it is unfenced, i.e. ready to serve produce and fetch requests.
#
# Request: int32 size=23, int16 api_key=3 (Metadata), int16 version=4, int32
# correlation_id=1, string client_id="kafka.sh", array topics=[] (int32 0),
# bool allow_auto_topic_creation=false.
# Response prefix: int32 size, int32 correlation_id, int32 throttle_ms, int32 #brokers.
probe() {
	local bytes
	bytes=$(timeout 3 bash -c '
		exec 3<>"/dev/tcp/127.0.0.1/$0" || exit 1
		printf "\x00\x00\x00\x17\x00\x03\x00\x04\x00\x00\x00\x01\x00\x08kafka.sh\x00\x00\x00\x00\x00" >&3
		od -An -tu1 -N16 <&3' "$1" 2>/dev/null) || return 1
	local -a b
	read -ra b <<<"$bytes"
	((${#b[@]} == 16)) || return 1
	# Correlation ID must echo ours; then the broker count must be > 0.
	[[ "${b[4]} ${b[5]} ${b[6]} ${b[7]}" == "0 0 0 1" ]] || return 1
	(((b[12] << 24 | b[13] << 16 | b[14] << 8 | b[15]) > 0))
}

tail_logs() {
	local f
	for f in "$logs/stdout.log" "$log"; do
		[[ -s $f ]] || continue
		say "last 40 lines of $f:"
		tail -n 40 "$f" >&2
	done
}

check_tools() {
	command -v java >/dev/null 2>&1 ||
		die "java not found on PATH; Kafka 4 needs a JDK/JRE 17 or newer (e.g. apt-get install openjdk-17-jre-headless)"
	command -v mvn >/dev/null 2>&1 ||
		die "mvn not found on PATH; Maven resolves the Kafka jars from Maven Central (e.g. apt-get install maven)"
	local v major
	v=$(java -version 2>&1 | sed -n 's/.* version "\([^"]*\)".*/\1/p' | head -n1)
	major=${v%%.*}
	[[ $major == 1 ]] && major=$(cut -d. -f2 <<<"$v")
	[[ $major =~ ^[0-9]+$ ]] || die "cannot tell the Java version from 'java -version' (got '$v')"
	((major >= 17)) || die "Java $v is too old: Kafka 4 brokers need Java 17 or newer"
}

# cp_ok reports whether the cached classpath file names only jars that still exist
# (~/.m2 may have been cleaned since it was written).
cp_ok() {
	[[ -s $1 ]] || return 1
	local -a jars
	local j
	IFS=: read -ra jars <"$1"
	((${#jars[@]} > 0)) || return 1
	for j in "${jars[@]}"; do
		[[ -f $j ]] || return 1
	done
}

# classpath prints the broker classpath, resolving it with Maven when the cache is
# missing or stale. The cache key is the POM's hash, so editing the pinned versions
# re-resolves. A lock serialises parallel starts (go test ./... runs one broker per
# package) so that two Mavens never write the same files in ~/.m2 at once.
classpath() {
	mkdir -p "$cache"
	local key cpfile
	key=$(sha256sum "$here/pom.xml" | cut -c1-16)
	cpfile="$cache/classpath-$key.txt"
	if ! cp_ok "$cpfile"; then
		(
			flock -w 900 9 || die "timed out waiting for another kafka.sh to resolve the classpath"
			cp_ok "$cpfile" && exit 0
			say "resolving Kafka $(kafka_version) jars with Maven (the first run downloads ~75 MB into ~/.m2)"
			local tmp="$cpfile.$$.tmp"
			if ! mvn -B -q -f "$here/pom.xml" dependency:build-classpath \
				-Dmdep.outputFile="$tmp" -Dmdep.includeScope=runtime >"$cache/mvn.log" 2>&1; then
				tail -n 40 "$cache/mvn.log" >&2
				rm -f "$tmp"
				die "Maven could not resolve the Kafka jars (full output: $cache/mvn.log)"
			fi
			mv "$tmp" "$cpfile"
		) 9>"$cache/lock" || exit 1
	fi
	cat "$cpfile"
}

# cluster_id prints a random KRaft cluster ID: 16 random bytes, URL-safe base64 without
# padding (what `StorageTool random-uuid` prints, without a JVM start). A leading '-'
# would be read as an option, so such IDs are drawn again, as Kafka itself does.
cluster_id() {
	local id
	while :; do
		id=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')
		[[ $id != -* ]] && break
	done
	echo "$id"
}

port_busy_msg() {
	local who=""
	if command -v ss >/dev/null 2>&1; then
		who=$(ss -ltnpH "sport = :$1" 2>/dev/null | sed -n 's/.*users:((\(.*\)))/\1/p' | head -n1)
	fi
	echo "port 127.0.0.1:$1 ($2) is already in use${who:+ by $who}; pick another with $3=<port>"
}

start() {
	local t0
	t0=$(now_us)
	check_tools

	local pid
	if pid=$(broker_pid); then
		if probe "$port"; then
			say "already running on 127.0.0.1:$port (pid $pid, dir $dir)"
			echo "kafka ready on 127.0.0.1:$port ($(secs_since "$t0")s)"
			return 0
		fi
		die "a broker for $dir is running (pid $pid) but not answering on 127.0.0.1:$port; run '$0 stop' first"
	fi
	[[ $port =~ ^[0-9]+$ && $cport =~ ^[0-9]+$ ]] || die "KAFKA_PORT and KAFKA_CONTROLLER_PORT must be numbers"
	[[ $port != "$cport" ]] || die "KAFKA_PORT and KAFKA_CONTROLLER_PORT must differ (both are $port)"
	if listening "$port"; then die "$(port_busy_msg "$port" client KAFKA_PORT)"; fi
	if listening "$cport"; then die "$(port_busy_msg "$cport" controller KAFKA_CONTROLLER_PORT)"; fi

	# Refuse to wipe a directory that we did not create: KAFKA_DIR could be anything.
	mkdir -p "$dir"
	if [[ ! -e $marker ]]; then
		[[ -z $(ls -A "$dir") ]] || die "KAFKA_DIR=$dir is not empty and was not made by kafka.sh; refusing to use it"
		echo "run directory of deploy/kafka-local/kafka.sh" >"$marker"
	fi
	set_paths
	mkdir -p "$logs"

	local cp
	cp=$(classpath)

	sed -e "s|@PORT@|$port|g" -e "s|@CONTROLLER_PORT@|$cport|g" -e "s|@DATA_DIR@|$data|g" \
		"$here/server.properties" >"$dir/server.properties"
	if [[ -n ${KAFKA_EXTRA_CONFIG:-} ]]; then cat "$KAFKA_EXTRA_CONFIG" >>"$dir/server.properties"; fi
	local -a format_args=()
	if [[ -n ${KAFKA_FORMAT_ARGS:-} ]]; then mapfile -t format_args <<<"$KAFKA_FORMAT_ARGS"; fi

	local -a jvm
	read -ra jvm <<<"${KAFKA_HEAP_OPTS:--Xms64m -Xmx512m}"
	# Small heap and the serial GC: light on a 2-core machine that may run two brokers
	# and the Go tests at once. Log4j writes to $logs/server.log.
	jvm+=(-XX:+UseSerialGC -XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true
		-Dlog4j2.configurationFile="$here/log4j2.properties" -Dkafka.logs.dir="$logs"
		-cp "$cp")

	if [[ ${KAFKA_KEEP_DATA:-} == 1 && -f $data/meta.properties ]]; then
		say "reusing the storage in $data (KAFKA_KEEP_DATA=1)"
	else
		[[ ${KAFKA_KEEP_DATA:-} == 1 ]] && say "KAFKA_KEEP_DATA=1 but $data holds no formatted storage; formatting"
		rm -rf "$data" "$log" "$logs/stdout.log"
		local -a quorum=(--standalone)
		if [[ -n ${KAFKA_INITIAL_CONTROLLERS:-} ]]; then quorum=(--initial-controllers "$KAFKA_INITIAL_CONTROLLERS"); fi
		if ! java "${jvm[@]}" kafka.tools.StorageTool format "${quorum[@]}" \
			-t "${KAFKA_CLUSTER_ID:-$(cluster_id)}" -c "$dir/server.properties" "${format_args[@]}" >"$logs/format.log" 2>&1; then
			cat "$logs/format.log" >&2
			die "formatting the storage in $data failed"
		fi
	fi

	say "starting Apache Kafka $(kafka_version) (KRaft) on 127.0.0.1:$port, controller 127.0.0.1:$cport"
	say "log: $log"
	rm -f "$pidfile"
	# setsid: the broker gets its own session, so terminal signals and hang-ups aimed at
	# whoever started it do not reach it; `stop` (or the watchdog) ends it. The inner
	# shell writes its own pid before exec'ing java, which is right whether or not
	# setsid had to fork.
	setsid bash -c 'echo $$ >"$0"; exec "$@"' "$pidfile" java "${jvm[@]}" kafka.Kafka \
		"$dir/server.properties" </dev/null >"$logs/stdout.log" 2>&1 &

	local i
	for ((i = 0; i < 50; i++)); do
		[[ -s $pidfile ]] && break
		sleep 0.1
	done
	pid=$(cat "$pidfile" 2>/dev/null) || die "the broker did not start (no pid file)"

	# From here on a failed or interrupted start must not leave a broker behind.
	trap 'kill -KILL "$pid" 2>/dev/null; rm -f "$pidfile"; exit 130' INT TERM
	if [[ -n ${KAFKA_OWNER_PID:-} ]]; then
		setsid bash "$self" __watchdog "$KAFKA_OWNER_PID" "$pid" </dev/null >"$logs/watchdog.log" 2>&1 &
	fi

	local deadline=$(($(now_us) + start_timeout * 1000000))
	while ! probe "$port"; do
		if ! alive "$pid"; then
			rm -f "$pidfile"
			tail_logs
			die "the broker exited during start-up (see $log)"
		fi
		if (($(now_us) > deadline)); then
			kill -KILL "$pid" 2>/dev/null || true
			wait_gone "$pid" 10 || true
			rm -f "$pidfile"
			tail_logs
			die "the broker did not answer on 127.0.0.1:$port within ${start_timeout}s (see $log)"
		fi
		sleep 0.2
	done
	trap - INT TERM
	echo "kafka ready on 127.0.0.1:$port ($(secs_since "$t0")s)"
}

# wait_gone waits up to $2 seconds for pid $1 to exit.
wait_gone() {
	local i
	for ((i = 0; i < $2 * 10; i++)); do
		alive "$1" || return 0
		sleep 0.1
	done
	! alive "$1"
}

stop() {
	local wpid
	wpid=$(cat "$watchfile" 2>/dev/null) || true
	# Ends the watchdog unless we are the watchdog.
	if [[ -n $wpid && $wpid != "$$" ]] && alive "$wpid"; then kill -TERM "$wpid" 2>/dev/null || true; fi
	rm -f "$watchfile"

	local pid
	if ! pid=$(broker_pid); then
		rm -f "$pidfile"
		say "no broker running for $dir"
		return 0
	fi
	# TERM runs Kafka's shutdown hook (controlled shutdown, clean log close), which
	# makes a KAFKA_KEEP_DATA restart fast; KILL only if that takes too long.
	kill -TERM "$pid" 2>/dev/null || true
	if ! wait_gone "$pid" "${KAFKA_STOP_TIMEOUT:-30}"; then
		say "broker (pid $pid) still running after ${KAFKA_STOP_TIMEOUT:-30}s; sending KILL"
		kill -KILL "$pid" 2>/dev/null || true
		wait_gone "$pid" 10 || die "broker (pid $pid) survived KILL"
	fi
	rm -f "$pidfile"
	local i
	for ((i = 0; i < 100; i++)); do
		listening "$port" || break
		sleep 0.1
	done
	listening "$port" && die "broker stopped but 127.0.0.1:$port is still in use"
	say "stopped broker on 127.0.0.1:$port (pid $pid)"
}

status() {
	local pid
	if ! pid=$(broker_pid); then
		echo "kafka not running (dir $dir)"
		return 3
	fi
	if probe "$port"; then
		echo "kafka running on 127.0.0.1:$port (pid $pid, log $log)"
		return 0
	fi
	echo "kafka process running (pid $pid) but not answering on 127.0.0.1:$port (log $log)"
	return 1
}

# watchdog stops the broker once the owner process has exited; it ends by itself when
# the broker is gone. Polling once a second keeps it cheap.
watchdog() {
	local owner=$1 pid=$2
	echo "$$" >"$watchfile"
	while alive "$owner" && alive "$pid"; do sleep 1; done
	if alive "$pid"; then
		say "owner process $owner is gone; stopping the broker"
		stop
		# Nobody is left to restart it: free the disk, keep the logs.
		rm -rf "$data"
	fi
}

case ${1:-} in
start) start ;;
stop) stop ;;
status) status ;;
__watchdog) watchdog "$2" "$3" ;;
*)
	echo "usage: $0 start|stop|status   (env: KAFKA_PORT, KAFKA_CONTROLLER_PORT, KAFKA_DIR, KAFKA_KEEP_DATA)" >&2
	exit 2
	;;
esac
