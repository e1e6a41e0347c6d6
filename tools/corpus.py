#!/usr/bin/env python3
"""Offline training corpus for the nano models: code, English prose and ChatML chat, plus held-out eval prompts.

Sources (whatever this machine has, read in a fixed order): Python files of the standard library and of every
site-packages directory (code; their docstrings feed prose and chat), package METADATA / README / docs / license
texts, /usr/share/doc, /usr/share/common-licenses and man pages (prose). Exact duplicates are dropped (sha256 of the
normalised text). Files whose path hashes into the held-out bucket never reach the corpus; the eval prompts come
from them.

Writes OUT/code.jsonl and OUT/prose.jsonl ({"text"}), OUT/chat.jsonl ({"messages": [{"role", "content"}]}),
OUT/stats.json, and --eval-out (models/nano/eval_prompts.json; format in tools/README.md).
"""
import argparse
import ast
import gzip
import hashlib
import json
import multiprocessing as mp
import os
import random
import re
import site
import sys
import sysconfig

SEED = 4242
HELD_OUT_BUCKETS = 40          # a file is held out when sha256(its relative path) % this == 0
MAX_FILE_BYTES = 200_000
SYSTEM_PROMPTS = ["You are a helpful assistant.", "You are a helpful assistant who explains Python code.",
                  "You are an expert Python programmer. Answer briefly and precisely."]
ASK_OBJECT = ["What does `{q}` in `{m}` do?", "Explain the {k} `{q}` from the `{m}` module.",
              "How do I use `{m}.{q}`?", "Can you describe what `{q}` is for?",
              "I found `{n}` in {m}. What is it?", "What is `{m}.{q}`?",
              "Tell me about the {k} `{q}` in {m}.", "Could you document `{q}` ({m}) for me?"]
ASK_MODULE = ["What is the `{m}` module for?", "Give me an overview of `{m}`.", "What does the {m} module do?",
              "Explain the purpose of the `{m}` module."]
ASK_SOURCE = ["Show me how `{q}` in `{m}` is implemented.", "Write the {k} `{q}` from `{m}`.",
              "Can you show the source code of `{m}.{q}`?", "How is `{q}` implemented in {m}?"]


def h64(text):
    return int.from_bytes(hashlib.sha256(text.encode("utf-8", "replace")).digest()[:8], "little")


def held_out(rel):
    return h64(rel) % HELD_OUT_BUCKETS == 0


def python_roots(extra=()):
    roots = [sysconfig.get_paths()["stdlib"]] + [os.path.abspath(p) for p in extra]
    for p in [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]] + site.getsitepackages():
        if p not in roots and os.path.isdir(p):
            roots.append(p)
    return roots


def walk_files(root, keep):
    """Sorted (path, rel) pairs under root for which keep(name) is true; skips caches and hidden dirs."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        # site-packages inside the stdlib directory is its own root: walking it twice would leak held-out files.
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d not in
                             ("__pycache__", "site-packages", "dist-packages"))
        for name in sorted(filenames):
            if keep(name):
                path = os.path.join(dirpath, name)
                out.append((path, os.path.relpath(path, root)))
    return out


def read_text(path):
    try:
        if os.path.getsize(path) > MAX_FILE_BYTES:
            return None
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rb") as f:
            data = f.read(MAX_FILE_BYTES * 4)
        text = data.decode("utf-8")
    except (OSError, UnicodeDecodeError, EOFError):
        return None
    if "\x00" in text:
        return None
    return text.replace("\r\n", "\n")


def signature(node):
    try:
        return "(" + ast.unparse(node.args) + ")"
    except Exception:  # noqa: BLE001 - odd syntax in third-party code
        return "(...)"


def parse_python(item):
    """One Python file -> (rel, text, module, [objects]); objects are dicts with kind, qualname, doc, sig, source."""
    path, rel = item
    text = read_text(path)
    if text is None or len(text.strip()) < 200:
        return None
    module = rel[:-3].replace(os.sep, ".").removesuffix(".__init__")
    module = module.split("site-packages.")[-1]
    objects = []
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return rel, text, module, objects
    lines = text.split("\n")
    doc = ast.get_docstring(tree)
    if doc:
        objects.append({"kind": "module", "qualname": module, "doc": doc, "sig": "", "source": ""})

    def visit(node, prefix):
        for child in getattr(node, "body", []):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                if child.name.startswith("_") and not child.name.startswith("__init__"):
                    continue
                q = prefix + child.name
                d = ast.get_docstring(child)
                kind = "class" if isinstance(child, ast.ClassDef) else ("method" if prefix else "function")
                if d:
                    src = "\n".join(lines[child.lineno - 1:child.end_lineno]) if child.end_lineno else ""
                    sig = "" if kind == "class" else signature(child)
                    objects.append({"kind": kind, "qualname": q, "doc": d, "sig": sig, "source": src})
                if isinstance(child, ast.ClassDef):
                    visit(child, q + ".")
    visit(tree, "")
    return rel, text, module, objects


def strip_roff(text):
    """Man page source -> plain text (crude: drop macros, keep their arguments)."""
    out = []
    for line in text.split("\n"):
        if line.startswith(('.\\"', "'\\\"", ".TH", ".so")):
            continue
        if line.startswith("."):
            parts = line.split(None, 1)
            line = parts[1] if len(parts) > 1 and parts[0] in (".SH", ".SS", ".B", ".I", ".BR", ".IR", ".IP",
                                                                ".TP", ".BI", ".RB", ".RI") else ""
        line = re.sub(r"\\f[BIRP]|\\\(em|\\-|\\&|\\e", lambda m: {"\\-": "-", "\\e": "\\", "\\(em": "-"}.get(
            m.group(0), ""), line)
        out.append(line.replace('"', "") if line.startswith("\"") else line)
    return re.sub(r"\n{3,}", "\n\n", "\n".join(out)).strip()


def prose_files(roots):
    """Documentation-like files: (path, rel, kind)."""
    doc_names = re.compile(r"(?i)^(readme|license|licence|copying|notice|authors|changes|changelog|history|"
                           r"metadata|copyright)([.\-_].*)?$|.*\.(md|rst|txt)$")
    items = []
    for root in roots:
        items += [(p, r, "doc") for p, r in walk_files(root, lambda n: bool(doc_names.match(n)))
                  if not r.endswith(("RECORD", "top_level.txt", "entry_points.txt", "requirements.txt"))]
    for root in ["/usr/share/doc", "/usr/share/common-licenses"]:
        if os.path.isdir(root):
            items += [(p, root + "/" + r, "doc") for p, r in walk_files(root, lambda n: not n.endswith(
                (".png", ".jpg", ".gif", ".svg", ".html", ".css", ".js")))]
    man = "/usr/share/man"
    if os.path.isdir(man):
        for d in sorted(os.listdir(man)):
            if re.fullmatch(r"man\d\w*", d):
                items += [(p, "man/" + r, "man") for p, r in walk_files(os.path.join(man, d), lambda n: True)]
    return items


def clean_prose(text, kind):
    if kind == "man":
        text = strip_roff(text)
    text = text.strip()
    letters = sum(c.isalpha() for c in text[:5000])
    return text if len(text) >= 300 and letters > 0.5 * min(len(text), 5000) else None


def object_chat(rng, module, obj):
    """One Q/A pair about a documented object: explain it from its docstring, or show its source."""
    q, k = obj["qualname"], obj["kind"]
    if k == "module":
        return rng.choice(ASK_MODULE).format(m=module), obj["doc"]
    n = q.rsplit(".", 1)[-1]
    if obj["source"] and len(obj["source"]) < 2000 and rng.random() < 0.3:
        return rng.choice(ASK_SOURCE).format(q=q, m=module, k=k), \
            f"Here is `{q}` from `{module}`:\n\n```python\n{obj['source']}\n```"
    head = f"`{module}.{q}{obj['sig']}`" if obj["sig"] else f"`{module}.{q}`"
    return rng.choice(ASK_OBJECT).format(q=q, m=module, k=k, n=n), f"{head} is a {k}.\n\n{obj['doc']}"


def conversations(rng, module, objects):
    """Conversations of 1-3 Q/A turns about one module's documented objects (each object used once)."""
    objs = [o for o in objects if 40 <= len(o["doc"]) <= 4000]
    rng.shuffle(objs)
    convs = []
    while objs:
        turns, msgs = rng.choice([1, 1, 2, 3]), []
        if rng.random() < 0.3:
            msgs.append({"role": "system", "content": rng.choice(SYSTEM_PROMPTS)})
        for obj in objs[:turns]:
            question, answer = object_chat(rng, module, obj)
            msgs += [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
        objs = objs[turns:]
        convs.append({"messages": msgs})
    return convs


def code_prompt(rng, text):
    """A code prompt from a held-out file: up to 40 lines ending at a random line past the header; plus the next 20."""
    lines = text.split("\n")
    if len(lines) < 40:
        return None
    end = rng.randrange(25, len(lines) - 10)
    start = max(0, end - 40)
    prompt = "\n".join(lines[start:end]) + "\n"
    if len(prompt.strip()) < 200 or len(prompt) > 3000:
        return None
    return {"prompt": prompt, "reference": "\n".join(lines[end:end + 20])}


class Budget:
    """Deduplicating writer of one corpus part with a byte budget."""

    def __init__(self, path, limit_bytes, seen):
        self.f, self.limit, self.size, self.count, self.seen = open(path, "w"), limit_bytes, 0, 0, seen

    def add(self, record, key_text):
        if self.size >= self.limit:
            return False  # checked first: normalising and hashing a large text costs the main process time
        key = hashlib.sha256(re.sub(r"\s+", " ", key_text).strip().encode()).digest()
        if key in self.seen:
            return False
        self.seen.add(key)
        line = json.dumps(record, ensure_ascii=False)
        self.f.write(line + "\n")
        self.size, self.count = self.size + len(line.encode()), self.count + 1
        return True

    def close(self):
        self.f.close()
        return {"bytes": self.size, "records": self.count}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="corpus directory (not checked in)")
    ap.add_argument("--eval-out", required=True, help="held-out eval prompts JSON (models/nano/eval_prompts.json)")
    ap.add_argument("--code-mb", type=float, default=90)
    ap.add_argument("--prose-mb", type=float, default=35)
    ap.add_argument("--chat-mb", type=float, default=45)
    ap.add_argument("--eval-per-kind", type=int, default=48)
    ap.add_argument("--workers", type=int, default=os.cpu_count())
    ap.add_argument("--extra-root", action="append", default=[], help="another directory of Python packages")
    ap.add_argument("--max-files", type=int, default=40000, help="parse at most this many Python files (hash order)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    mb = 1 << 20
    seen = set()
    code = Budget(os.path.join(args.out, "code.jsonl"), args.code_mb * mb, seen)
    prose = Budget(os.path.join(args.out, "prose.jsonl"), args.prose_mb * mb, seen)
    chat = Budget(os.path.join(args.out, "chat.jsonl"), args.chat_mb * mb, seen)
    roots = python_roots(args.extra_root)
    py = [it for root in roots for it in walk_files(root, lambda n: n.endswith(".py"))]
    # Spread the budget over all packages: order files by a hash of their relative path, not alphabetically.
    py.sort(key=lambda it: (h64(it[1]), it[1]))
    py = py[:args.max_files]
    held_code, held_chat, docstrings, doc_bytes, parsed = [], [], [], 0, 0
    full = False
    with mp.Pool(args.workers) as pool:
        # Drain every result rather than break out: leaving the pool with tasks in flight has terminate() kill busy
        # workers, the likeliest cause of a 32-worker rebuild that hung here on the GPU box (defunct workers).
        for res in pool.imap(parse_python, py, chunksize=64):
            full = full or (code.size >= code.limit and chat.size >= chat.limit and doc_bytes >= prose.limit and
                            min(len(held_code), len(held_chat)) >= 4 * args.eval_per_kind)
            if full:
                continue  # every part is full: the remaining files would only be dropped
            parsed += 1
            if res is None:
                continue
            rel, text, module, objects = res
            rng = random.Random(h64(rel) ^ SEED)
            if held_out(rel):
                cp = code_prompt(rng, text)
                if cp:
                    held_code.append(dict(cp, source=rel))
                for conv in conversations(rng, module, objects):
                    if conv["messages"][-2]["role"] == "user":
                        msgs = conv["messages"][:-1]
                        held_chat.append({"messages": msgs, "reference": conv["messages"][-1]["content"],
                                          "source": rel})
                continue
            code.add({"text": text}, text)
            for obj in objects:
                if len(obj["doc"]) >= 300:
                    docstrings.append(obj["doc"])
                    doc_bytes += len(obj["doc"])
            for conv in conversations(rng, module, objects):
                chat.add(conv, json.dumps(conv["messages"]))
    full_limit, prose.limit = prose.limit, 0.6 * prose.limit  # leave 40% of prose to documents and man pages
    for doc in docstrings:
        prose.add({"text": doc}, doc)
    prose.limit = full_limit
    docs = [it for it in prose_files(roots) if not held_out(it[1])]
    docs.sort(key=lambda it: (h64(it[1]), it[1]))
    for path, rel, kind in docs:
        if prose.size >= prose.limit:
            break
        text = read_text(path)
        text = clean_prose(text, kind) if text else None
        if text:
            prose.add({"text": text}, text)
    rng = random.Random(SEED)
    held_code.sort(key=lambda r: h64(r["source"]))
    held_chat.sort(key=lambda r: h64(r["source"] + json.dumps(r["messages"])))
    held_chat = [r for r in held_chat if len(r["reference"]) < 3000]
    rng.shuffle(held_code)
    rng.shuffle(held_chat)
    evals = {"format": "tools/README.md, section Eval prompts", "seed": SEED,
             "code": [dict(r, id=f"code-{i:03d}") for i, r in enumerate(held_code[:args.eval_per_kind])],
             "chat": [dict(r, id=f"chat-{i:03d}") for i, r in enumerate(held_chat[:args.eval_per_kind])]}
    os.makedirs(os.path.dirname(os.path.abspath(args.eval_out)), exist_ok=True)
    with open(args.eval_out, "w") as f:
        json.dump(evals, f, indent=1, ensure_ascii=False)
        f.write("\n")
    stats = {"python_files": len(py), "parsed": parsed, "roots": roots, "code": code.close(), "prose": prose.close(),
             "chat": chat.close(), "eval": {"code": len(evals["code"]), "chat": len(evals["chat"])},
             "held_out_pool": {"code": len(held_code), "chat": len(held_chat)}, "python": sys.version.split()[0]}
    with open(os.path.join(args.out, "stats.json"), "w") as f:
        json.dump(stats, f, indent=1)
    print(json.dumps(stats))


if __name__ == "__main__":
    main()
