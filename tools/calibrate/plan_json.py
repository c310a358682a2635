"""A plan file's nodes as one dict per node, whatever its version (docs/reference/plan-format.md):
version 3 stores the nodes as columns, versions 1 and 2 as objects. `as_rows` turns a version 3
plan into the version 2 plan with the same content, which the analysis scripts read and pipeplan
still loads: "nodes" (dicts with id, kind, op, device, stream, stage, microbatches, duration_us,
label, alloc_bytes, free_bytes, work_bytes when not 0, and for send/recv transfer, bytes, peer,
match), "edges" ([from, to] data edges) and "streams" (each with its "order").

    python3 plan_json.py PLAN OUT     writes PLAN (any version) as version 2 to OUT"""

KINDS = {"c": "compute", "s": "send", "r": "recv"}
OPS = {"F": "F", "B": "B", "1": "P1", "2": "P2", "O": "O"}
TRANSFERS = {"-": "none", "a": "activation", "g": "gradient", "e": "evict", "l": "load",
             "w": "grads"}
SPELLINGS = {"F": "F", "B": "B", "P1": "P1_", "P2": "P2_"}


def label(node):
    """The label a node's fields spell: its action ("0F3", "1P2_4+5"), after "evict " or "load "
    for a BPipe stash move and "grads " for a stage's weight gradients (DualPipe's exchange); a
    device's optimizer step is "optimizer"."""
    if node["op"] == "O":
        return "optimizer"
    text = str(node["stage"]) + SPELLINGS[node["op"]] + "+".join(map(str, node["microbatches"]))
    if node["kind"] != "compute" and node.get("transfer") in ("evict", "load", "grads"):
        text = node["transfer"] + " " + text
    return text


def as_rows(plan):
    """The plan with nodes, edges and stream orders in the version 2 shape (a version 1 or 2 plan
    is returned as it is)."""
    if not isinstance(plan, dict) or plan.get("version", 0) < 3:
        return plan
    table = plan["nodes"]
    count = table["count"]
    streams = plan["streams"]
    more = {row[0]: row[1:] for row in table["more_microbatches"]}
    labels = dict(table["labels"])
    overlapped = set(table.get("overlapped", []))
    nodes = []
    for i in range(count):
        stream = table["stream"][i]
        kind = KINDS[table["kind"][i]]
        node = {"id": i, "kind": kind, "op": OPS[table["op"][i]],
                "device": streams[stream]["device"], "stream": stream,
                "stage": table["stage"][i],
                "microbatches": [table["microbatch"][i]] + more.get(i, []),
                "duration_us": table["duration_values"][table["duration"][i]],
                "alloc_bytes": table["alloc_bytes"][i], "free_bytes": table["free_bytes"][i],
                "work_bytes": table["work_bytes"][i]}
        if node["work_bytes"] == 0:
            del node["work_bytes"]
        if i in overlapped:
            node["overlaps_next"] = True
        if kind != "compute":
            node.update(transfer=TRANSFERS[table["transfer"][i]], bytes=table["bytes"][i],
                        peer=streams[stream]["peer"], match=table["match"][i])
        node["label"] = labels.get(i, label(node))
        nodes.append(node)
    orders = [[] for _ in streams]
    for node in nodes:
        orders[node["stream"]].append(node["id"])
    rows = {key: value for key, value in plan.items() if key != "data_edges"}
    rows["version"] = 2
    rows["nodes"] = nodes
    flat = plan["data_edges"]
    rows["edges"] = [[flat[k], flat[k + 1]] for k in range(0, len(flat), 2)]
    rows["streams"] = [dict(s, order=s.get("order", orders[k])) for k, s in enumerate(streams)]
    return rows


if __name__ == "__main__":
    import json
    import sys

    if len(sys.argv) != 3:
        sys.exit("usage: plan_json.py PLAN OUT")
    with open(sys.argv[1], encoding="utf-8") as f:
        converted = as_rows(json.load(f))
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        json.dump(converted, f, indent=1)
