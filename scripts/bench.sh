#!/usr/bin/env bash
# Issue 6's benchmark on two discs: the machine's own disc (a folder on it,
# never tmpfs) and, as root, a journaled ext4 image this script creates,
# loop-mounts, and removes at the end whatever happens.
#
#   scripts/bench.sh [--peers] [taskhoster bench flags...]
#
# Without --peers: `taskhoster bench` (throughput, hand-off, memory, depth,
# start-up) on each disc. With --peers: the interleaved comparison, at one
# claim in flight per worker and at four, P = W = 32, with beanstalkd
# (installed with apt-get if missing, as root), fsfloor (built from
# ../shared/tools/fsfloor into a temp folder) and River (BENCH_RIVER).
#
# Environment:
#   BENCH_BIN    the taskhoster binary (default bin/taskhoster; `make bench` builds it)
#   BENCH_DIR    folder on the own disc (default /var/tmp/taskhoster-bench)
#   BENCH_OUT    where the reports go, as .txt and .json (default var/bench)
#   BENCH_COMMIT the source BENCH_BIN was built from (default: git describe now)
#   BENCH_IMAGE  0 skips the journaled image; BENCH_OWN=0 skips the own disc
#   FSFLOOR_SRC  the fsfloor sources (default ../shared/tools/fsfloor)
#   BENCH_PG     1 (with --peers) adds Taskhoster on PostgreSQL (serve --store
#                postgres, one server and two): a throwaway PostgreSQL cluster
#                (fsync and synchronous_commit on, as shipped) is started in a
#                folder on each disc and removed after it; the bench is given its
#                URL and data folder (--database-dir, for the database's CPU)
#   BENCH_RIVER  with --peers, 1 (the default) adds River, one job per
#                transaction and InsertMany batches, when PostgreSQL's binaries
#                are installed: a throwaway cluster as for BENCH_PG, and
#                bench/river (a module of its own, fetched through the Go
#                module proxy) is built; 0 skips it. It says so when it skips.
#   BENCH_ONLY   with --peers: the contenders to run, comma-separated, of
#                files,beanstalkd,fsfloor,postgres,river (default: all given);
#                BENCH_ONLY=postgres,river BENCH_RIVER=1 runs just those two
set -euo pipefail

peers=0
if [ "${1:-}" = "--peers" ]; then
	peers=1
	shift
fi
bin=${BENCH_BIN:-bin/taskhoster}
own=${BENCH_DIR:-/var/tmp/taskhoster-bench}
out=${BENCH_OUT:-var/bench}
fsfloor_src=${FSFLOOR_SRC:-../shared/tools/fsfloor}

say() { printf '== %s\n' "$*" >&2; }

[ -x "$bin" ] || { say "no $bin: run 'make build' first"; exit 2; }
# The source the binary was just built from (make bench builds it first).
commit=${BENCH_COMMIT:-$(git describe --always --dirty --abbrev=12 2>/dev/null || echo unknown)}
mkdir -p "$own" "$out"
fstype=$(findmnt -n -o FSTYPE -T "$own" || echo unknown)
case "$fstype" in
tmpfs | ramfs | overlay)
	say "$own is on $fstype, not a disc: set BENCH_DIR to a folder on a disc"
	exit 2
	;;
esac

tmp=$(mktemp -d)
img="" mnt="" pgdir=""
# stop_pg stops the throwaway cluster started by start_pg and removes it.
stop_pg() {
	if [ -n "$pgdir" ]; then
		su postgres -s /bin/sh -c "$pgbin/pg_ctl -D '$pgdir/data' -m fast -w stop" >/dev/null 2>&1 ||
			"$pgbin/pg_ctl" -D "$pgdir/data" -m fast -w stop >/dev/null 2>&1 || true
		rm -rf "$pgdir"
		pgdir=""
	fi
}
# start_pg DIR starts a throwaway cluster in DIR/pg (on the disc under test;
# PostgreSQL's defaults, so fsync and synchronous_commit are on) on a free
# loopback port and sets pg_url.
start_pg() {
	pgdir="$1/pg"
	rm -rf "$pgdir"
	mkdir -p "$pgdir"
	local as=(sh -c)
	if [ "$(id -u)" = 0 ]; then
		chown postgres "$pgdir"
		as=(su postgres -s /bin/sh -c)
	fi
	local port
	port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
	"${as[@]}" "$pgbin/initdb -D '$pgdir/data' -U postgres --auth=trust -E UTF8 --locale=C" >"$pgdir/initdb.log" 2>&1 || {
		say "initdb failed: $(tail -1 "$pgdir/initdb.log")"
		return 1
	}
	"${as[@]}" "$pgbin/pg_ctl -D '$pgdir/data' -l '$pgdir/server.log' -w -o \"-c listen_addresses=127.0.0.1 -c port=$port -c unix_socket_directories='$pgdir' -c max_connections=300\" start" >/dev/null || {
		say "PostgreSQL did not start: $(tail -3 "$pgdir/server.log" 2>/dev/null)"
		return 1
	}
	pg_url="postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"
}
cleanup() {
	stop_pg
	if [ -n "$mnt" ] && mountpoint -q "$mnt"; then
		umount "$mnt" 2>/dev/null || umount -l "$mnt" || true
	fi
	[ -n "$mnt" ] && rmdir "$mnt" 2>/dev/null || true
	[ -n "$img" ] && rm -f "$img"
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

discs=()
if [ "${BENCH_OWN:-1}" = 0 ]; then
	say "BENCH_OWN=0: skipping the own disc"
else
	discs+=("$own|own disc ($fstype, $(findmnt -n -o SOURCE -T "$own"))")
fi
if [ "${BENCH_IMAGE:-1}" = 0 ]; then
	say "BENCH_IMAGE=0: skipping the journaled image"
elif [ "$(id -u)" != 0 ]; then
	say "not root: skipping the journaled ext4 image (it needs mount -o loop); the own disc only"
else
	img="$own/journaled-ext4.img"
	mnt="$own/journaled-ext4"
	rm -f "$img"
	truncate -s 2G "$img"
	mkfs.ext4 -q -F "$img"
	mkdir -p "$mnt"
	mount -o loop "$img" "$mnt"
	discs+=("$mnt|journaled ext4 image (2 GiB, loop-mounted)")
fi

extra=()
if [ "$peers" = 1 ]; then
	if ! command -v beanstalkd >/dev/null; then
		if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
			say "installing beanstalkd"
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq beanstalkd >/dev/null ||
				say "could not install beanstalkd"
		fi
	fi
	if command -v beanstalkd >/dev/null; then
		extra+=(--beanstalkd "$(command -v beanstalkd)")
	else
		say "no beanstalkd: its runs are skipped"
	fi
	if [ -d "$fsfloor_src" ] && (cd "$fsfloor_src" && go build -o "$tmp/fsfloor" .); then
		extra+=(--fsfloor "$tmp/fsfloor")
	else
		say "could not build fsfloor from $fsfloor_src: its runs are skipped"
	fi
fi
river=0 pg=0
if [ "$peers" = 1 ] && [ -n "${BENCH_ONLY:-}" ]; then
	extra+=(--contenders "$BENCH_ONLY")
elif [ "$peers" = 1 ] && [ "${BENCH_PG:-0}" != 1 ]; then
	# River's cluster does not bring Taskhoster's own PostgreSQL runs.
	extra+=(--contenders files,beanstalkd,fsfloor,river)
fi
if [ "$peers" = 1 ] && { [ "${BENCH_PG:-0}" = 1 ] || [ "${BENCH_RIVER:-1}" = 1 ]; }; then
	pgbin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
	if [ -z "$pgbin" ] && command -v initdb >/dev/null; then
		pgbin=$(dirname "$(command -v initdb)")
	fi
	if [ -z "$pgbin" ]; then
		say "PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/initdb): River's runs (and BENCH_PG's) are SKIPPED; install postgresql to compare with River"
	else
		pg=1
		if [ "${BENCH_RIVER:-1}" = 1 ]; then
			if (cd bench/river && go build -o "$tmp/riverbench" .); then
				river=1
			else
				say "could not build bench/river: River's runs are SKIPPED"
			fi
		fi
	fi
elif [ "$peers" = 1 ]; then
	say "BENCH_RIVER=0: River's runs are skipped"
fi

status=0
for entry in "${discs[@]}"; do
	dir=${entry%%|*}
	label=${entry#*|}
	name=own
	[ "$dir" = "$mnt" ] && name=journaled
	flags=()
	if [ "$peers" = 1 ]; then
		flags=(--peers "${extra[@]}")
		name="$name-peers"
	elif [ "$dir" = "$mnt" ]; then
		# 2 GiB hold no million task files (one 4 KiB block and one inode
		# each); memory does not depend on the disc.
		flags=(--sections throughput,handoff,depth --depths 100,10000)
	fi
	if [ "$pg" = 1 ]; then
		if start_pg "$dir"; then
			flags+=(--database-url "$pg_url" --database-dir "$pgdir/data")
			[ "$river" = 1 ] && flags+=(--river "$tmp/riverbench")
		else
			say "no PostgreSQL on $label: the runs on it are skipped there"
		fi
	fi
	say "$label: $dir"
	if ! "$bin" bench --dir "$dir/run" --label "$label" --commit "$commit" --json "$out/$name.json" "${flags[@]}" "$@" |
		tee "$out/$name.txt"; then
		status=1
	fi
	stop_pg
	rm -rf "$dir/run"
done
say "reports: $out/*.txt, $out/*.json"
exit $status
