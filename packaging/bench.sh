#!/bin/sh
# Start-up benchmark of the frozen kb (hyperfine; apt-get install hyperfine).
#
#   packaging/bench.sh            (or: make -C packaging bench)
#
# One-shot wall time of `kb --version`, a BM25-only search and a hybrid search without rerank,
# for: dist/kb (single file, after its first run), dist/kb-onedir/kb, dist/kb with
# KB_FROZEN_NO_TWEAKS=1 (entry-point tweaks off), and the unfrozen .venv/bin/kb. Then dist/kb
# with the page cache dropped before every run (needs root; skipped otherwise), and the first
# run (unpack into an empty cache). Artifact: bench/out/hugo.kb if present, else the golden one.
# Writes build/bench.md (table), build/bench-*.json (hyperfine exports) and build/oneshot.md
# (interleaved one-shot medians, the ratios issue 20 asks for, and packaging/phases.py breakdowns).
#
# Environment: RUNS (warm runs per command, default 30), COLD_RUNS (default 5), COLD=0 to skip
# the page-cache rows (dropping the page cache slows every other job on a shared machine).
set -eu

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
command -v hyperfine >/dev/null || { echo "bench: needs hyperfine (apt-get install -y hyperfine)" >&2; exit 1; }
[ -x dist/kb ] || { echo "bench: build first (packaging/build.sh)" >&2; exit 1; }
RUNS=${RUNS:-30}
COLD_RUNS=${COLD_RUNS:-5}
ART=bench/out/hugo.kb
[ -f "$ART" ] || ART=tests/golden/tiny-v1.kb
OUT=build
mkdir -p "$OUT"
H=$(mktemp -d /tmp/kb-bench.XXXXXX)
trap 'rm -rf "$H"' EXIT
env -i HOME="$H" dist/kb --version > /dev/null # first run: unpack

Q_BM25="search taxonomies -i $ART --mode bm25 --no-rerank --no-stale-check --json"
Q_HYB="search 'how to configure taxonomies' -i $ART --no-rerank --no-stale-check --json"
FROZEN="env -i HOME=$H $ROOT/dist/kb"
ONEDIR="env -i HOME=$H $ROOT/dist/kb-onedir/kb"
NOTWEAK="env -i HOME=$H KB_FROZEN_NO_TWEAKS=1 $ROOT/dist/kb"
UNFROZEN="$ROOT/.venv/bin/kb"

run() { # run NAME hyperfine-args... -> build/bench-NAME.json
    name=$1
    shift
    hyperfine -N --style none --export-json "$OUT/bench-$name.json" "$@" > /dev/null 2>&1
}

echo "bench: warm ($RUNS runs each; artifact $ART)"
run warm -w 3 -r "$RUNS" \
    -n "dist/kb --version" "$FROZEN --version" \
    -n "dist/kb bm25" "$FROZEN $Q_BM25" \
    -n "dist/kb hybrid" "$FROZEN $Q_HYB" \
    -n "onedir --version" "$ONEDIR --version" \
    -n "onedir bm25" "$ONEDIR $Q_BM25" \
    -n "onedir hybrid" "$ONEDIR $Q_HYB" \
    -n "dist/kb no-tweaks --version" "$NOTWEAK --version" \
    -n "dist/kb no-tweaks bm25" "$NOTWEAK $Q_BM25" \
    -n "dist/kb no-tweaks hybrid" "$NOTWEAK $Q_HYB" \
    -n "unfrozen --version" "$UNFROZEN --version" \
    -n "unfrozen bm25" "$UNFROZEN $Q_BM25" \
    -n "unfrozen hybrid" "$UNFROZEN $Q_HYB"

if [ "${COLD:-1}" = 1 ] && (sync && echo 3 > /proc/sys/vm/drop_caches) 2> /dev/null; then
    echo "bench: cold (page cache dropped before each of $COLD_RUNS runs)"
    run cold -r "$COLD_RUNS" --prepare 'sh -c "sync; echo 3 > /proc/sys/vm/drop_caches"' \
        -n "cold dist/kb --version" "$FROZEN --version" \
        -n "cold dist/kb bm25" "$FROZEN $Q_BM25" \
        -n "cold dist/kb hybrid" "$FROZEN $Q_HYB"
    run first-cold -r "$COLD_RUNS" --prepare "sh -c 'rm -rf $H/.cache; sync; echo 3 > /proc/sys/vm/drop_caches'" \
        -n "first run (unpack), cold cache" "$FROZEN --version"
else
    echo "bench: cannot drop the page cache here (not root?): cold rows skipped"
fi
run first -r "$COLD_RUNS" --prepare "rm -rf $H/.cache" -n "first run (unpack), dist/kb in page cache" "$FROZEN --version"

# One-shot ratios and start-up phases (issue 20), every command interleaved round by round
# (packaging/oneshot.py): BM25, hybrid and hybrid + rerank on $ART, and BM25 and hybrid on a
# multilingual-e5-small artifact (bench/out/hugo-e5.kb: the same corpus) when it exists.
E5=bench/out/hugo-e5.kb
# hybrid-ct2 embeds the query with CTranslate2 (--compute-type int8), as kb did before issue 20.
# bm25-q: BM25 over the hybrid command's own query (the same search in both modes, as the
# issue's table compares them); bm25: the one-word BM25 search this benchmark always ran.
Q_BM25Q="search 'how to configure taxonomies' -i $ART --mode bm25 --no-rerank --no-stale-check --json"
set -- "version=$FROZEN --version" "bm25=$FROZEN $Q_BM25" "bm25-q=$FROZEN $Q_BM25Q" "hybrid=$FROZEN $Q_HYB" \
    "hybrid-ct2=$FROZEN $Q_HYB --compute-type int8" \
    "rerank=$FROZEN search 'how to configure taxonomies' -i $ART --rerank --no-stale-check --json"
RATIOS="--ratio hybrid/bm25-q --ratio hybrid/bm25 --ratio bm25/version --ratio hybrid-ct2/bm25 --ratio rerank/bm25"
if [ -f "$E5" ]; then
    set -- "$@" "bm25-e5=$FROZEN search taxonomies -i $E5 --mode bm25 --no-rerank --no-stale-check --json" \
        "bm25-e5-q=$FROZEN search 'how to configure taxonomies' -i $E5 --mode bm25 --no-rerank --no-stale-check --json" \
        "hybrid-e5=$FROZEN search 'how to configure taxonomies' -i $E5 --no-rerank --no-stale-check --json"
    RATIOS="$RATIOS --ratio hybrid-e5/bm25-e5-q --ratio hybrid-e5/bm25-e5"
fi
echo "bench: one-shot, interleaved ($RUNS rounds; packaging/oneshot.py)"
# shellcheck disable=SC2086
"$ROOT/.venv/bin/python" packaging/oneshot.py times --runs "$RUNS" $RATIOS "$@" > "$OUT/oneshot.md"
echo >> "$OUT/oneshot.md"
"$ROOT/.venv/bin/python" packaging/oneshot.py phases --runs 7 "$@" >> "$OUT/oneshot.md"
cat "$OUT/oneshot.md"

"$ROOT/.venv/bin/python" - "$OUT" "$ART" <<'EOF'
import glob, json, os, statistics, sys
out, art = sys.argv[1], sys.argv[2]
rows = []
for name in ("warm", "cold", "first-cold", "first"):
    p = os.path.join(out, f"bench-{name}.json")
    if os.path.exists(p):
        rows += json.load(open(p))["results"]
size = os.path.getsize("dist/kb")
load = open("/proc/loadavg").read().split()[:3]
lines = [f"dist/kb: {size:,} bytes; artifact {art}; {os.cpu_count()} CPUs; load average after the run {' '.join(load)}", "",
         "| command | median ms | mean ± sd ms | min ms | CPU (user+sys) ms | runs |", "|---|---:|---:|---:|---:|---:|"]
for r in rows:
    t = r["times"]
    cpu = 1e3 * (r["user"] + r["system"])
    lines.append(f"| {r['command']} | {1e3 * statistics.median(t):.0f} | {1e3 * r['mean']:.0f} ± {1e3 * (r['stddev'] or 0):.0f} | {1e3 * min(t):.0f} | {cpu:.0f} | {len(t)} |")
text = "\n".join(lines)
open(os.path.join(out, "bench.md"), "w").write(text + "\n")
print(text)
EOF
