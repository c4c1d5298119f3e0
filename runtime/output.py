"""The one place search results become output: a versioned JSON object, JSON Lines, or text."""

from __future__ import annotations

import json
import os

from kb.common.usage import printable

from .results import Notice, Response, Result
from .results import SCHEMA_VERSION


def _present(record) -> dict:
    """A record as a dict in field order, without the fields it does not have (None)."""
    scalars = _SCALARS
    return {name: v if type(v) in scalars else _plain(v) for name, v in record._asdict().items() if v is not None}


_SCALARS = frozenset((str, int, float, bool))


def _plain(v):
    """``v`` as JSON holds it: a record (a NamedTuple) as a dict of all its fields, None included."""
    if type(v) in _SCALARS:
        return v
    if hasattr(v, "_asdict"):
        return {name: _plain(x) for name, x in v._asdict().items()}
    if isinstance(v, tuple):
        return [x if type(x) in _SCALARS else _plain(x) for x in v]
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    return v


def result_dict(r: Result) -> dict:
    return _present(r)


def notice_dict(n: Notice) -> dict:
    d = {"kind": n.kind}
    if n.reason is not None:
        d["reason"] = n.reason
    if n.files is not None:
        d["files"] = list(n.files)
    d["message"] = n.message
    return d


def response_dict(resp: Response, artifact: dict) -> dict:
    q = resp.query
    return {
        "schema_version": SCHEMA_VERSION,
        "query": q.text,
        "parsed_query": resp.parsed.as_dict() if resp.parsed is not None else None,
        "rewrites": list(q.rewrites),
        "entities": list(q.entities),
        "mode": q.mode,
        "top_k": q.top_k,
        "filters": {"statuses": list(q.statuses), "all_statuses": q.all_statuses, "tags": list(q.tags), "path": q.path},
        "group": q.group,
        "reranked": resp.reranked,
        "rerank": None if resp.rerank is None else resp.rerank._asdict(),
        "artifact": artifact,
        "results": [result_dict(r) for r in resp.results],
        "tag_contexts": resp.tag_contexts,
        "notices": [notice_dict(n) for n in resp.notices],
        **({"timings_ms": resp.timings_ms} if q.explain else {}),
    }


def json_text(obj, pretty: bool = False) -> str:
    """JSON as kb prints it: indented for a person at a terminal (``pretty``), else one compact
    line for a pipe, a script or an agent (json's C encoder, which it uses only without indent:
    several times faster, and fewer tokens)."""
    if pretty:
        return json.dumps(obj, ensure_ascii=False, indent=2)
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def render_json(resp: Response, artifact: dict, pretty: bool = False) -> str:
    return json_text(response_dict(resp, artifact), pretty)


def render_jsonl(resp: Response, artifact: dict) -> str:
    return "\n".join(json.dumps(result_dict(r), ensure_ascii=False) for r in resp.results)


FORMATS = ("text", "json", "jsonl", "csv", "md", "files")
CSV_COLUMNS = ("rank", "score", "score_kind", "confidence", "path", "section", "start_line", "end_line", "status", "tags", "chunk_id", "doc_id", "title", "snippet")


def render_csv(resp: Response) -> str:
    """One row per result, with a header row (RFC 4180 quoting)."""
    import csv
    import io

    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_COLUMNS)
    for r in resp.results:
        w.writerow([r.rank, r.score, r.score_kind, r.confidence, r.path, r.section, r.lines[0], r.lines[1], r.status, ",".join(r.tags), r.chunk_id, r.doc_id, r.title, r.snippet if r.text is None else r.text])
    return buf.getvalue().rstrip("\n")


def render_files(resp: Response, roots: dict | None = None) -> str:
    """The results' distinct paths in rank order, one per line (for xargs -d '\\n'). Of a set
    (``roots``: each member's name -> its corpus root when that folder is on this machine, else
    None), each path joined to its member's root, else ``NAME:PATH``."""
    if roots is None:
        return "\n".join(dict.fromkeys(r.path for r in resp.results))
    return "\n".join(dict.fromkeys(os.path.join(roots[r.artifact], r.path) if roots.get(r.artifact) else f"{r.artifact}:{r.path}" for r in resp.results))


def render_md(resp: Response) -> str:
    """A readable report to paste into an issue or a chat."""
    q = resp.query
    out = [f"### kb search: {q.text or ' '.join(q.rewrites + q.entities)}", ""]
    for r in resp.results:
        where = f"`{r.path}` § {r.section}" if r.section else f"`{r.path}`"
        out.append(f"{r.rank}. {where} (lines {r.lines[0]}-{r.lines[1]}, confidence {r.confidence:.2f})")
        body = r.text if r.text is not None else r.snippet
        out.extend(f"   > {line}" for line in body.split("\n"))
        out.append("")
    if not resp.results:
        out.append("_No results._")
    out.extend(f"_Note: {n.message}_" for n in resp.notices)
    return "\n".join(out).rstrip("\n")


def _score(r: Result) -> str:
    return f"{r.score:.4f}" if r.score_kind == "rrf" else f"{r.score:.2f}"


def render_human(resp: Response, show_status: bool = True, highlight=None, show_artifact: bool = False) -> str:
    """Text for people: the results, then tag contexts. Notices go to stderr (render_notices).
    ``show_status``: print each result's status (pointless when the corpus has one status);
    ``show_artifact``: name each result's artifact (a set);
    ``highlight``: marks the query's words in snippets (runtime/snippets.py, on a terminal)."""
    q = resp.query
    mark = highlight or (lambda s: s)
    scope = "all statuses" if q.all_statuses else ("status " + ", ".join(q.statuses) if q.statuses else "historical/superseded filtered")
    shown = f"{len(resp.results)} result{'' if len(resp.results) == 1 else 's'}"
    out = [f'KB Search Results for: "{printable(q.text or " ".join(q.rewrites + q.entities))}"', f"Showing top {shown}" + (f" ({scope})" if show_status else ""), ""]
    for r in resp.results:
        where = f'{r.path} § "{r.section}"' if r.section else r.path
        out.append(printable(f"{r.rank}. [score: {_score(r)} · confidence {r.confidence:.2f}] {where}"))
        if r.text is not None:
            out.extend(f"   > {line}" for line in r.text.split("\n"))
        else:
            out.append(f'   > "{mark(r.snippet)}"')
        extra = [f"lines {r.lines[0]}-{r.lines[1]}" if r.lines[1] > r.lines[0] else f"line {r.lines[0]}", f"chunk {r.chunk_id}"]
        if show_artifact:
            extra.append(f"artifact {r.artifact}")
        if r.also_matched:
            extra.append(f"{r.also_matched} more matching chunk{'' if r.also_matched == 1 else 's'} in this document")
        out.append("   " + (f"Status: {r.status} · " if show_status else "") + " · ".join(extra))
        if r.path_contexts:
            out.append(printable("   Context: " + "; ".join(f"{c.prefix}: {c.description}" for c in r.path_contexts)))
        if r.explain is not None:
            e = r.explain
            legs = ", ".join(f"{n} #{v['rank']} ({v['raw_score']:.3f}) +{v['rrf']:.4f}" for n, v in e.legs.items())
            out.append(f"   Explain: {legs}; bonus +{e.bonus:.2f}; rrf {e.rrf:.4f}")
            if e.rerank:
                rr = e.rerank
                out.append(f"   Rerank: logit {rr.logit:.3f}, p {rr.probability:.3f}, weights retrieval {rr.retrieval_weight:.2f} / rerank {rr.rerank_weight:.2f}")
        out.append("")
    if resp.tag_contexts:
        out.append("Tags: " + "; ".join(f"{t}: {d}" if d else t for t, d in resp.tag_contexts.items()))
    return "\n".join(out).rstrip("\n")


def render_notices(resp: Response) -> list[str]:
    """The notices as lines for stderr."""
    return [f"kb: note: {n.message}" + (f" ({n.reason})" if n.reason else "") for n in resp.notices]


def render_get(rec: dict) -> str:
    """A get record (kb get, /get, the MCP get tools) as text: a header naming the document, its
    path contexts, then the chunks, or the lines numbered as in the source (``N<TAB>line``, as
    ``cat -n``; ``cut -f2-`` gives the lines back exactly)."""
    doc = rec["document"]
    contexts = ["Context: " + "; ".join(f"{c['prefix']}: {c['description']}" for c in doc["path_contexts"])] if doc.get("path_contexts") else []
    if "total_lines" in rec:
        first, last = rec["lines"]
        head = [f"{doc['path']} · {doc['title']} · lines {first}-{last} of {rec['total_lines']}", *contexts]
        width = len(str(last))
        return "\n".join([printable(h) for h in head] + [f"{n:>{width}}\t{line}" for n, line in enumerate(rec["text"].split("\n"), first)])
    asked = rec.get("chunk")
    chunks = rec["previous"] + [asked] + rec["next"] if asked else rec["chunks"]
    out = [printable(h) for h in (f"{doc['path']} · {doc['title']} · {doc['n_chunks']} chunk{'' if doc['n_chunks'] == 1 else 's'}", *contexts)]
    for c in chunks:
        mark = " (asked for)" if asked and c["chunk_id"] == asked["chunk_id"] else ""
        where = f" § {c['section']}" if c["section"] else ""
        out.append("\n" + printable(f"--- chunk {c['chunk_id']}{where} · lines {c['lines'][0]}-{c['lines'][1]}{mark}"))
        out.append(c["text"])
    if rec.get("truncated"):
        out.append(f"\n(first {len(chunks)} chunk{'' if len(chunks) == 1 else 's'} shown; --max-chunks for more)")
    return "\n".join(out)
