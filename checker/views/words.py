"""The sentences every view of a trace shares: what a branch's program is
(`program_labels`, `program_summary`, `is_plain`), what the trace is about
(`subject`, `is_harness`, `initial_words`), where a branch is in its program
(`doing`), what an action did (`action_words`) and what a witness shows
(`describe`), in plain text.

`cowcheck explain` (checker/views/explain.py), the stepper page
(checker/views/html.py) and the block-graph pictures (checker/views/graph.py)
all say these things with the functions here, so a trace reads the same in
the terminal, the browser and a picture. They work on states in the
counterexample file's JSON form (cowcheck.model.state.state_to_json), which
is what the pages are drawn from, and import nothing that draws: a page that
needs the words does not pull in the terminal's rich.

Traces of allocator code through the engine harness (cowcheck.model.harness)
read the same way: each host call is one action, told as the call and what
followed from it (the copies it returned and the kernel launched, the child
born, the drafts rolled back, the output checked, the exception it raised),
with the allocator's refcounts as it reports them. Cache scenarios add the
sentences of prefix caching (a lookup's hits, a touch, an eviction, a
prefill, the keys cache-full gives, why a request still waits).

One idea, though long: the sentence for every kind of action, one small
function each, sharing the helpers that write a block, a token and a
change; split by topic the helpers would have to move to a third module
that every part imports."""

from __future__ import annotations

import re
from typing import Any, Optional

from cowcheck.model.action import CONNECTOR, DEVICE, ENGINE
from cowcheck.model.branches import BRANCH_NAMES, parse_operation
from cowcheck.model.harness import CACHE_REQUIRED, REQUIRED
from cowcheck.model.stepkinds import ALLOCS, COPIES, TRANSFER_STEPS, WAITS
from cowcheck.model.structure import Op

#: the host calls of the engine harness, as an action's step names them
HOST_CALLS = ("append", "fork", "rollback", "free", "admit", "cancel", "copy_done", "kernel_done")


# -- a branch's program --------------------------------------------------------------
def program_labels(spec: dict) -> list[str]:
    """A branch's operations (its scenario entry, JSON form) one per entry as
    the model counts them, so that a branch's `done` indexes this list:
    `speculate K` is K drafts and then the verify that starts the rollback
    (cowcheck.model.scenario.parse_operation flattens them the same way)."""
    labels = []
    for text in spec.get("program") or ["append"] * spec.get("appends", 0):
        ops = parse_operation(text)
        if len(ops) == 1:
            labels.append(text)
            continue
        drafts = len(ops) - 1
        labels += [f"draft {k} of {drafts}" for k in range(1, drafts + 1)] + [f"verify {drafts} drafts"]
    return labels


def is_plain(spec: dict) -> bool:
    """A branch written as `appends = k`: a root that only appends."""
    return "program" not in spec


def program_summary(spec: dict) -> str:
    """A branch's program in brief: "2 appends", or its operations and parent;
    a request of a cache scenario starts with its prompt and ends with the
    request it is admitted after."""
    n = spec.get("appends", 0)
    text = f"{n} append{'s' if n != 1 else ''}" if is_plain(spec) else f"program [{', '.join(spec['program'])}]"
    if "prompt" in spec:
        text = f"prompt {_tokens(spec['prompt'])}, {text}"
    if spec.get("parent"):
        text += f", forked by {spec['parent']}"
    if spec.get("after"):
        text += f", admitted after {spec['after']}"
    return text + (", may cancel" if spec.get("may_cancel") else "")


# -- prefix caching (docs/semantics.md#prefix-caching) --------------------------
def is_cache(scenario: dict) -> bool:
    """A cache scenario (`cache = "prefix"`): its branches are requests."""
    return scenario.get("cache") == "prefix"


def key_text(key: list | tuple) -> str:
    """A block's key as every view writes it: its tokens in parentheses."""
    return "(" + " ".join(key) + ")"


def cache_words(state: dict) -> str:
    """The cache of a state (JSON form) in one line: each key and its
    block, the free ones (cached, yet the next allocation may evict them)
    said so."""
    cache = state.get("cache") or {}
    if not cache:
        return "empty"
    free = set(state["free"])
    return "; ".join(f"({key}) → block {b}" + (" (free: evictable)" if b in free else "")
                     for key, b in sorted(cache.items(), key=lambda kv: kv[1]))


def host_words(state: dict) -> str:
    """A transfer scenario's host tier and connector (JSON form) in one
    line: each host block with a key or pins, the host free list, the
    reports the connector has not processed, and the sends whose lease
    expired while they are still in flight."""
    hosts = state.get("host") or []
    used = [f"h{h['id']} {'keyed ' + key_text(h['key']) if h.get('key') else 'unkeyed'} holding {_slots(h['slots'])}"
            + (f", pins {h['pins']}" if h["pins"] else "") + (" (free)" if h["free"] else "")
            for h in hosts if h.get("key") or h["pins"]]
    text = (f"Host tier: {'; '.join(used) or 'nothing keyed or pinned'}; host free list {state.get('host_free')}"
            if hosts else "No host tier")
    reports = state.get("reports") or []
    if reports:
        text += "; reports pending: " + "; ".join(_move_text(r) + (" ok" if r["ok"] else " FAILED") for r in reports)
    expired = [q["transfer"] for q in state["queue"] if "transfer" in q and q["transfer"].get("reported")]
    if expired:
        text += "; lease expired, still in flight: " + "; ".join(_move_text(t) for t in expired)
    return text


def _move_text(t: dict) -> str:
    """A transfer (in flight or reported) in a few words."""
    return {"store": f"store of block {t['block']} to h{t['host']}", "load": f"load of h{t['host']} into block {t['block']}",
            "recv": f"recv into block {t['block']}", "send": f"send of {t['branch']}'s block {t['block']}"}[t["kind"]]


def _lookup(cache: dict, prompt: list, B: int) -> list[int]:
    """The blocks `lookup` finds for a prompt (the model's rule: whole
    blocks while each is a key, never the block of the last token)."""
    hits = []
    for i in range(1, (len(prompt) - 1) // B + 1):
        block = cache.get(" ".join(prompt[:i * B]))
        if block is None:
            break
        hits.append(block)
    return hits


def _admission_short(steps: list[str], spec: dict, state: dict) -> Optional[str]:
    """Why an atomic admission cannot start now (its steps up to the first
    wait, applied one after another, each with its first choice), or None."""
    B = len(state["blocks"][0]["slots"]) if state["blocks"] else 1
    prompt, free, hits = list(spec.get("prompt") or []), list(state["free"]), []
    for step in steps:
        op = step.split()[0]
        if op in WAITS:
            break
        if op == "lookup":
            hits = _lookup(state.get("cache") or {}, prompt, B)
        elif op == "touch-hits":
            free = [b for b in free if b not in hits]
        elif op == "alloc-prompt":
            need = -(-len(prompt) // B) - len(hits)
            if len(free) < need:
                served = f", {len(hits)} served from the cache" if hits else ""
                return (f"it needs {need} free block{'s' if need != 1 else ''} for its prompt{served}, "
                        f"and {len(free)} {'is' if len(free) == 1 else 'are'} free")
            free = free[need:]
        elif op in ALLOCS:
            if not free:
                return f"its step {step!r} needs a free block, and none is free"
            free = free[1:]
    return None


def _waiting(protocol: Optional[dict], spec: dict, state: Optional[dict]) -> str:
    """Why a request still waits: its `after` request is not done, or its
    atomic admission cannot start yet."""
    after = spec.get("after")
    if state is None:
        return "waiting: not admitted yet" + (f" (admitted only once {after} is done)" if after else "")
    if after and state["branches"][after]["status"] not in ("finished", "cancelled"):
        return f"waiting: admitted only once {after} is done ({after} is {state['branches'][after]['status']})"
    admit = (protocol or {}).get("admit") or {}
    if admit.get("atomic"):
        short = _admission_short(admit.get("steps", []), spec, state)
        if short is not None:
            return f"waiting: its atomic admission cannot start yet: {short}"
    return "waiting: its admission can start now" + (f" ({after} is done)" if after else "")


def is_harness(scenario: dict) -> bool:
    """A scenario (JSON form) whose subject is allocator or scheduler
    code, checked through a harness, rather than a protocol."""
    return scenario.get("allocator") is not None or scenario.get("scheduler") is not None


def host_calls(scenario: dict) -> tuple[str, ...]:
    """The host calls that are a harness trace's steps, as its scenario's
    kind has them: a cache scenario's adapter admits each request and forks
    nothing. `start` (called once, before the first step) and `table` (a
    question, not a step) are left out."""
    required = CACHE_REQUIRED if is_cache(scenario) else REQUIRED
    return tuple(call for call in required if call not in ("start", "table"))


def reuse_words(reuse: Optional[str], harness: bool) -> str:
    """The free-list order as a header gives it: allocator code takes its
    free blocks in its own order, so `reuse` (which only a protocol file's
    model follows) is not shown for it."""
    return "the allocator's" if harness or reuse is None else reuse


def subject(scenario: dict) -> tuple[str, str]:
    """What a scenario (JSON form) checks, as ("protocol", its name) or
    ("allocator", the code's reference)."""
    if scenario.get("allocator") is not None:
        return "allocator", str(scenario["allocator"])
    if scenario.get("scheduler") is not None:
        return "scheduler", str(scenario["scheduler"])
    return "protocol", str(scenario["protocol"]["name"])


def _names(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def initial_words(scenario: dict, initial: Optional[dict] = None) -> str:
    """The initial state in one sentence (`initial`, the initial state in
    JSON form, names the blocks the allocator's `start` chose, for a
    harness trace)."""
    if is_cache(scenario):
        names = [name for name, _ in zip(BRANCH_NAMES, scenario["branch"])]
        later = [f"{name} only once {spec['after']} is done" for name, spec in zip(names, scenario["branch"]) if spec.get("after")]
        return ("Nothing has happened yet: every block is free and the cache is empty; every request waits to be admitted"
                + (f" ({'; '.join(later)})" if later else "") + ".")
    unborn = [(name, spec["parent"]) for name, spec in zip(BRANCH_NAMES, scenario["branch"]) if spec.get("parent")]
    children = "; ".join(f"{child} is unborn until {parent} forks it" for child, parent in unborn)
    if is_harness(scenario):
        roots = [name for name, spec in zip(BRANCH_NAMES, scenario["branch"]) if not spec.get("parent")]
        call = f"start({roots!r}, {scenario['prompt']})"
        tables = {name: initial["branches"][name]["working"] for name in roots} if initial else {}
        if not tables:
            given = "the prompt's blocks"
        elif len({tuple(t) for t in tables.values()}) == 1:
            table = next(iter(tables.values()))
            shared = ", shared" if len(roots) > 1 else ""
            given = f"the prompt's blocks {table}{shared}" if table else "no block (the prompt is empty)"
        else:
            given = "their tables: " + ", ".join(f"{name} {table}" for name, table in tables.items())
        root = "root branch" if len(roots) == 1 else "root branches"
        text = f"The allocator's {call} gives the {root} {_names(roots)} {given}"
        return text + (f"; {children}." if children else ".")
    if not unborn:
        return "The fork has happened: every branch maps the prompt's blocks."
    return f"The fork has happened: every root branch maps the prompt's blocks; {children}."


def doing(protocol: Optional[dict], spec: dict, branch: dict, state: Optional[dict] = None) -> str:
    """Where a branch is in its program and its protocol (the branch in
    JSON form, its scenario entry, the protocol definition: None for
    allocator code, whose branches are always between host calls). With
    the whole `state`, a waiting request says why it waits."""
    status = branch["status"]
    if status == "waiting":
        return _waiting(protocol, spec, state)
    if status == "unborn":
        return f"unborn: not forked yet (its parent {spec.get('parent')} brings it to life with a fork)"
    if status != "running":
        return str(status)
    labels = program_labels(spec)
    done, op = branch["done"], branch["op"]
    if op is None or protocol is None:
        between = "between operations" if protocol is not None else "between host calls"
        if is_plain(spec):
            return f"{between} ({done} of {len(labels)} appends done)"
        nxt = labels[done] if done < len(labels) else "finish"
        return f"{between} ({done} of {len(labels)} operations done; next: {nxt})"
    if op == Op.APPEND:
        label, steps = f"{branch['path']} path", protocol["append"]["paths"][branch["path"]]["steps"]
        if labels[done].startswith("draft"):
            label += f" ({labels[done]})"
    else:
        label, steps = str(op), protocol[str(op)]["steps"]
        if op == Op.FORK:
            label = labels[done]
    bound = ", ".join(f"{k}={branch[k]}" for k in ("tail", "new", "rejected", "hits") if branch.get(k) not in (None, []))
    return f"{label}, next: {steps[branch['step']]}" + (f" ({bound})" if bound else "")


# -- what an action did ------------------------------------------------------------------
def token(t: object) -> str:
    """A slot's token as every view writes it: `_` for an empty slot."""
    return "_" if t is None else str(t)


def _slots(slots: list | tuple) -> str:
    return "[" + " ".join(map(token, slots)) + "]"


def _change(before: dict, after: dict, block: int, counter: str) -> str:
    old, new = before["blocks"][block][counter], after["blocks"][block][counter]
    return f"{counter} {old} → {new}" if old != new else f"{counter} stays {new}"


def _tokens(tokens: list) -> str:
    return " ".join(tokens)


def _blocks(blocks: list[int]) -> str:
    return ("block " if len(blocks) == 1 else "blocks ") + ", ".join(map(str, blocks))


def _program_words(who: str, op: str, binds: dict, before: dict, after: dict) -> Optional[str]:
    """What a step of a fork or a rollback did (docs/semantics.md#branch-programs);
    None for the other steps."""
    was, me = before["branches"][who], after["branches"][who]
    if op == "incref-all":
        changes = "; ".join(f"block {b} {_change(before, after, b, 'refcount')}" for b in dict.fromkeys(was["working"]))
        return f"{who} takes one more reference on every block of its working table {was['working']}, for its child: {changes}."
    if op == "share":
        child = binds["child"]
        kid = after["branches"][child]
        return (f"{who} brings {child} to life: {child} starts with {who}'s working table {list(binds['table'])} as both "
                f"of its tables, and with {who}'s sequence {_tokens(kid['sequence'])} (pos {kid['pos']}). "
                "No refcount changes.")
    if op == "verify":
        accepted, rejected = binds["accepted"], binds["rejected"]
        drafts = accepted + rejected
        if not rejected:
            return f"The verifier accepts all {drafts} of {who}'s drafts; {who}'s rollback still runs, with nothing to rewind."
        gone = _tokens(was["sequence"][-rejected:])
        return f"The verifier accepts {accepted} of {who}'s {drafts} drafts and rejects the last {rejected} ({gone}): {who} rolls back."
    if op == "rewind":
        rejected = binds["rejected"]
        if not rejected:
            return f"{who} rewinds by 0 tokens: every draft was accepted, pos stays {me['pos']}."
        gone = _tokens(was["sequence"][-rejected:])
        kept = ("What the rejected draft's kernel writes stays in its slot" if rejected == 1 else
                "What the rejected drafts' kernels write stays in their slots")
        return (f"{who} rewinds by {rejected} to pos {me['pos']}: its sequence drops {gone}. {kept}, "
                f"as garbage past pos that no faithful read reaches.")
    if op == "trim":
        dropped = list(binds["dropped"])
        if not dropped:
            return f"{who} trims its working table {me['working']}: no block lies past position {me['pos']}, nothing is dropped."
        changes = "; ".join(f"block {b} {_change(before, after, b, 'refcount')}" for b in dict.fromkeys(dropped))
        refs = "its reference to it" if len(set(dropped)) == 1 else "its references to them"
        return (f"{who} trims its working table to {me['working']}, the blocks its positions below {me['pos']} use: "
                f"it drops {_blocks(dropped)} and {refs} ({changes}).")
    return None


# -- a step of prefix caching -------------------------------------------------------------
def _block_size(state: dict) -> int:
    return len(state["blocks"][0]["slots"]) if state["blocks"] else 1


def _hits_count(n: int) -> str:
    return f"{n} hit{'s' if n != 1 else ''}"


def _lookup_words(who: str, hits: list[int], prompt: list, before: dict) -> str:
    B = _block_size(before)
    cap = (len(prompt) - 1) // B
    text = f"{who} looks up its prompt {_tokens(prompt)} in the cache, block by block"
    if cap == 0:
        return (f"{text}: no hit is possible, since the last prompt token is always recomputed and no whole block "
                "comes before it. No refcount changes.")
    if hits:
        found = ", ".join(f"block {b} under {key_text(prompt[:(i + 1) * B])}" for i, b in enumerate(hits))
        text += f": {_hits_count(len(hits))}, {found}"
    else:
        text += ": no hit"
    if len(hits) < cap:
        text += f"; {key_text(prompt[:(len(hits) + 1) * B])} is not in the cache, so the lookup stops there"
    elif (cap + 1) * B <= len(prompt):
        text += (f"; it looks no further: the block holding the last prompt token is never a hit, "
                 "since that token is always recomputed")
    return text + ". No refcount changes."


def _touch_words(who: str, hits: list[int], before: dict, after: dict) -> str:
    if not hits:
        return f"{who} has no hits to map: nothing changes."
    parts = [f"block {b} ({_change(before, after, b, 'refcount')}"
             + (", taken off the free list: a free block still cached is reused as it is" if b in before["free"] else "") + ")"
             for b in hits]
    return (f"{who} takes a reference on each of its hits and maps them as the first entries of its working table "
            f"{after['branches'][who]['working']}: " + "; ".join(parts) + ".")


def _evicts(blocks: list[int], before: dict, hits: Optional[list[int]] = None) -> str:
    """What evicting BLOCKS dropped from the cache (HITS: the admission's
    own, which an allocation before touch-hits may take)."""
    out = ""
    for b in blocks:
        key = before["blocks"][b].get("key")
        if key:
            out += f"; it evicts block {b}, dropping the key {key_text(key)} from the cache"
            if b in (hits or []):
                out += f" (block {b} is one of the hits its own lookup has just found, not yet touched)"
    return out


def _alloc_prompt_words(who: str, binds: dict, before: dict, after: dict) -> str:
    blocks = list(binds.get("blocks") or [])
    me = after["branches"][who]
    if not blocks:
        return f"{who} needs no new block for its prompt: its working table is {me['working']}."
    each = " each" if len(blocks) > 1 else ""
    return (f"{who} allocates {_blocks(blocks)} for the rest of its prompt (refcount 1{each}), appended to its working "
            f"table: {me['working']}" + _evicts(list(binds.get("evicted") or []), before,
                                                  list(before["branches"][who].get("hits") or [])) + ".")


def _prefill_words(who: str, binds: dict, before: dict, after: dict) -> str:
    frm, to = binds["from"], binds["to"]
    me, was = after["branches"][who], before["branches"][who]
    kernel = next(q["kernel"] for q in reversed(after["queue"]) if "kernel" in q and q["kernel"]["branch"] == who)
    B = _block_size(before)
    blocks = list(dict.fromkeys(kernel["snapshot"][p // B] for p in range(frm, to + 1)))
    where = f"position {frm}" if frm == to else f"positions {frm} to {to}"
    hits = f"; positions 0 to {frm - 1} are its cache hits, not recomputed" if frm else ""
    return (f"{who} launches its prefill: one kernel that will write {_tokens(me['sequence'][frm:to + 1])} at {where} "
            f"into {_blocks(blocks)} through its published table {kernel['snapshot']}, then read positions 0 to {to}{hits}. "
            f"pos {was['pos']} → {me['pos']}, verified {me['verified']}.")


def _keying_words(who: str, op: str, binds: dict, before: dict, after: dict) -> str:
    """cache-full / cache-drafts: each block keyed and its key, and each full
    block that stays unkeyed because another block holds its key."""
    B = _block_size(before)
    me = after["branches"][who]
    keyed, seq = list(binds.get("keyed") or []), me["sequence"]
    limit = me["verified"] if op == "cache-full" else me["pos"]
    cache = before.get("cache") or {}
    named, duplicates = [], []
    for i, b in enumerate(me["working"]):
        if (i + 1) * B > limit:
            break
        key = seq[:(i + 1) * B]
        if b in keyed:
            named.append(f"block {b} under {key_text(key)}")
        elif before["blocks"][b].get("key") is None and " ".join(key) in cache:
            duplicates.append(f" Block {b} is a full duplicate: block {cache[' '.join(key)]} already holds {key_text(key)}, "
                              f"so block {b} stays unkeyed.")
    counted = (f"its verified positions (verified {limit})" if op == "cache-full" else
               f"every position it has written, drafts included (pos {limit}, verified {me['verified']})")
    if named:
        text = f"{who} keys its full blocks, counting {counted}: {', '.join(named)}; the cache now maps each key to its block."
    else:
        text = f"{who} keys no block, counting {counted}: no full block of its working table is new to the cache."
    return text + "".join(duplicates)


def _cache_words(who: str, op: str, args: list[str], binds: dict, before: dict, after: dict,
                 spec: Optional[dict]) -> Optional[str]:
    """What a step of prefix caching did (docs/semantics.md#prefix-caching);
    None for the other steps."""
    if op in TRANSFER_STEPS:
        return _transfer_step_words(who, op, binds)
    if op == "lookup":
        return _lookup_words(who, list(binds.get("hits") or []), list((spec or {}).get("prompt") or []), before)
    if op == "touch-hits":
        return _touch_words(who, list(binds.get("hits") or []), before, after)
    if op == "alloc-prompt":
        return _alloc_prompt_words(who, binds, before, after)
    if op == "prefill":
        return _prefill_words(who, binds, before, after)
    if op in ("cache-full", "cache-drafts"):
        return _keying_words(who, op, binds, before, after)
    if op == "alloc-no-evict":
        block = binds[args[0]]
        key = before["blocks"][block].get("key")
        text = f"{who} takes block {block} from the free list as '{args[0]}' (refcount 1) without evicting it"
        if key:
            return (f"{text}: the block keeps its key {key_text(key)}, so the cache still maps {key_text(key)} "
                    f"to a block {who} now owns and will write (a stale key).")
        return f"{text} (it has no key: nothing is left stale)."
    if op == "alloc" and "evicted" in binds:
        key = before["blocks"][binds["evicted"]].get("key")
        return (f"{who} takes block {binds['evicted']} from the free list as '{args[0]}' (refcount 1), evicting it: "
                f"the key {key_text(key or [])} leaves the cache.")
    return None


def _transfer_step_words(who: str, op: str, binds: dict) -> str:
    """What a transfer step did, in plain words (docs/semantics.md#transfers)."""
    blocks, hosts = list(binds.get("blocks") or []), list(binds.get("hosts") or [])
    if op == "wait-transfers":
        return f"{who} waits for its loads, recvs and sends to be reported: every one has been."
    if op == "host-lookup":
        hits = list(binds.get("host_hits") or [])
        return (f"{who} looks its prompt up in the host cache: {_names([f'h{h}' for h in hits])} hold its next blocks."
                if hits else f"{who} looks its prompt up in the host cache: nothing more is there.")
    if not blocks:
        return f"{who} runs '{op}': it launches nothing."
    if op == "load":
        pairs = ", ".join(f"h{h} into block {b}" for h, b in zip(hosts, blocks))
        return f"{who} launches loads of {pairs}: each host block is pinned and each GPU block held until the load is reported."
    if op == "recv":
        return f"{who} launches recvs of its prompt into {_blocks(blocks)}: the remote prefill's NIC writes them, nothing on this device orders it."
    if op == "send":
        return f"{who} launches sends of {_blocks(blocks)}: the remote reader reads them when each completes."
    pairs = ", ".join(f"block {b} to h{h}" for b, h in zip(blocks, hosts))
    keyed = " The host blocks are keyed now, at launch, before any data lands." if op == "store-keyed" else ""
    evicted = binds.get("evicted")
    gone = f" Evicted from the host cache: {_names([f'h{h}' for h in evicted])}." if evicted else ""
    return f"{who} launches stores of {pairs}: each GPU block held and each host block pinned until the store is reported.{keyed}{gone}"


def _transfer_words(op: str, binds: dict, before: dict, after: dict) -> str:
    """What a transfer's completion or failure did, in one sentence, and
    then what makes it wrong where something does, in the engine's words: a
    store that copies a block before the kernel filling it lands, a load of
    a host block whose key names tokens it does not hold, a recv into a
    block another request owns now, a send that reads other tokens than its
    producer had (docs/semantics.md#transfers)."""
    kind, who, block, host = binds["kind"], binds.get("branch"), int(binds["block"]), binds.get("host")
    if op == "transfer-fail":
        text = f"The {kind} of {who}'s block {block} fails: it reads and writes nothing; the connector will report the failure."
        hb = (after.get("host") or [])[host] if kind == "store" and isinstance(host, int) else None
        if hb and hb.get("key"):    # keyed at launch (store-keyed): the key stays, the data never came
            text += (f" h{host} keeps the key {key_text(hb['key'])} it was given at launch, "
                     f"holding {_slots(hb['slots'])}{_mismatch(hb, _block_size(after))}.")
        return text
    read, wrote = _slots(before['blocks'][block]['slots']), _slots(after['blocks'][block]['slots'])
    if kind == "store":
        landing = _unlanded(before, block)
        if landing:
            return (f"The store of block {block} to h{host} completes before {landing} lands: it copied block {block} as it "
                    f"is now, {read}, into h{host}.")
        return _TRANSFER_DONE[kind].format(who=who, block=block, host=host, read=read, wrote=wrote)
    text = _TRANSFER_DONE[kind].format(who=who, block=block, host=host, read=read, wrote=wrote)
    if kind == "load":
        hb = before["host"][host]
        if hb.get("key") and _mismatch(hb, _block_size(before)):
            text += f" h{host} is keyed {key_text(hb['key'])} but held {_slots(hb['slots'])}: a stale load."
    elif kind == "recv":
        owners = [name for name, br in before["branches"].items() if name != who and block in br["working"]]
        if owners:
            text += (f" Block {block} is {_names(owners)}'s now ({who} freed it before its recv landed): the remote "
                     f"prefill's tokens overwrite {read}.")
    if kind in ("load", "recv"):
        readers = [f"{k['branch']}'s kernel for position {k['pos']}" for q in before["queue"] if (k := q.get("kernel"))
                   and block in k["snapshot"]]
        if readers:
            text += f" Still in flight and reading block {block}: {_names(readers)}, which will read these tokens."
    elif kind == "send":
        sent = next((q["transfer"] for q in before["queue"] if "transfer" in q and q["transfer"]["kind"] == "send"
                     and q["transfer"]["branch"] == who and q["transfer"]["block"] == block), None)
        if sent is not None and list(sent["tokens"]) != list(before["blocks"][block]["slots"][:len(sent["tokens"])]):
            lease = f" ({who}'s lease expired before the send completed)" if sent.get("reported") else ""
            text += (f" {who} had {_tokens(sent['tokens'])} there when the send was launched: block {block} was reused{lease}.")
    return text


def _mismatch(host_block: dict, block_size: int) -> str:
    """' but holds ...' where a keyed host block does not hold its key's
    last B tokens (what host-key-content judges), else ''."""
    key = host_block.get("key")
    if not key or list(key[-block_size:]) == list(host_block["slots"]):
        return ""
    return " (its key names tokens it does not hold)"


def _unlanded(state: dict, block: int) -> Optional[str]:
    """The kernel in flight that will still write `block`, in words ("a's
    prefill", "a's kernel for position 3"), or None."""
    B = _block_size(state)
    for q in state["queue"]:
        k = q.get("kernel")
        if k is None:
            continue
        first = k.get("from", k["pos"])
        if any(k["snapshot"][p // B] == block for p in range(first, k["pos"] + 1)):
            return f"{k['branch']}'s prefill" if "from" in k else f"{k['branch']}'s kernel for position {k['pos']}"
    return None


#: a transfer's completion by its kind: `read` the GPU block before it,
#: `wrote` after it
_TRANSFER_DONE = {
    "store": "The store of block {block} to h{host} completes: it read block {block} as it is now, {read}, into h{host}.",
    "load": "The load of h{host} into block {block} completes: block {block} now holds {wrote}.",
    "recv": "The recv into block {block} completes: block {block} now holds {wrote}.",
    "send": "The send of {who}'s block {block} completes: the remote reader reads {read}.",
}


def _connector_words(action: dict, binds: dict, before: dict, after: dict) -> str:
    """The connector's report or a lease's expiry."""
    if action["step"] == "expire":
        return (f"{binds.get('branch')}'s lease expires: the connector reports its sends as done though they are still in "
                "flight; they will still read their blocks when they complete.")
    reports = before.get("reports") or []
    done = "; ".join(f"{r['kind']} of block {r['block']} {'ok' if r['ok'] else 'FAILED'}" for r in reports)
    keyed = [h for h, hb in enumerate(after.get("host") or []) if hb.get("key") and not (before.get("host") or [])[h].get("key")]
    text = f"The connector reports the completed transfers ({done or 'none'})."
    for h in keyed:
        hb = after["host"][h]
        if _mismatch(hb, _block_size(after)):
            text += f" h{h} is now keyed {key_text(hb['key'])} but holds {_slots(hb['slots'])}: its key names tokens it does not hold."
        else:
            text += f" h{h} is now keyed {key_text(hb['key'])}, holding {_slots(hb['slots'])}."
    return text


def _verified_words(who: str, op: str, before: dict, after: dict) -> str:
    """What a step did to a request's verified count, where it says
    something: a draft's write leaves it, verify and rewind move it."""
    was, me = before["branches"][who].get("verified"), after["branches"][who].get("verified")
    if was is None or op not in ("write", "verify", "rewind"):
        return ""
    if op == "write":
        return f" It is a draft: verified stays {me} until the verifier accepts it." if was == me else ""
    return f" Verified: {was} → {me}." if was != me else f" Verified stays {me}."


def _branch_words(who: str, step: str, binds: dict, before: dict, after: dict, spec: Optional[dict] = None) -> str:
    """What a branch's step did, in one sentence (the step table,
    docs/semantics.md#steps; `spec`: the branch's scenario entry, which a
    cache scenario's lookup needs for its prompt)."""
    op, *args = step.split()
    return _step_words(who, op, args, binds, before, after, spec) + _verified_words(who, op, before, after)


def _step_words(who: str, op: str, args: list[str], binds: dict, before: dict, after: dict, spec: Optional[dict]) -> str:
    step = " ".join([op, *args])
    arg: list[Any] = [binds.get(a) for a in args]  # block ids, as recorded
    me = after["branches"][who]
    program = _program_words(who, op, binds, before, after)
    if program is not None:
        return program
    cache = _cache_words(who, op, args, binds, before, after, spec)
    if cache is not None:
        return cache
    if op == "decide":
        tail = binds.get("tail")
        return (f"{who} decides how to write position {me['pos']}: the {binds['path']} path"
                + (f", with block {tail} as its tail." if tail is not None else " (a block boundary: no tail)."))
    if op == "alloc":
        return f"{who} takes block {arg[0]} from the free list as '{args[0]}' (refcount 1)."
    if op in ("incref", "decref"):
        verb = "takes another" if op == "incref" else "drops its"
        return f"{who} {verb} reference to block {arg[0]}: {_change(before, after, arg[0], 'refcount')}."
    if op in ("hold", "release"):
        verb = "pins" if op == "hold" else "unpins"
        return f"{who} {verb} block {arg[0]}: {_change(before, after, arg[0], 'holds')}."
    if op in COPIES:
        copy = next(q["copy"] for q in reversed(after["queue"]) if "copy" in q)
        n = copy["n"]
        return (f"{who} launches an asynchronous copy of block {arg[0]}'s first {n} slot{'s' if n != 1 else ''} "
                f"into block {arg[1]}; the device may complete it at any later step.")
    if op == "wait-copy":
        return f"{who}'s wait for copies into block {arg[0]} passes: none is in flight."
    if op == "wait-kernel":
        return f"{who}'s wait for its kernels passes: none is in flight."
    if op == "append":
        return f"{who} appends block {arg[0]} to its working table: {me['working']}."
    if op == "replace":
        return f"{who} puts block {arg[1]} where block {arg[0]} was in its working table: {me['working']}."
    if op == "publish":
        return f"{who} publishes its working table {me['published']}: its next kernel launch will use it."
    if op == "write":
        kernel = next(q["kernel"] for q in reversed(after["queue"]) if "kernel" in q)
        return (f"{who} launches a kernel that will write {kernel['token']} at position {kernel['pos']} "
                f"through its published table {kernel['snapshot']}.")
    if op == "decref-all":
        order = ", from its last entry to its first," if "verified" in me else ""
        return f"{who} drops its reference to every block of its working table {before['branches'][who]['working']}{order} and clears both tables."
    if op == "check-output":
        return f"{who} checks its output: positions 0 to {binds['pos'] - 1} read through its working table {binds['table']}."
    return f"{who}: {step}."


# -- a host call of allocator code (the engine harness) -------------------------------
def is_host_call(action: dict) -> bool:
    """An action that is one call into allocator code (its step is the
    adapter method's bare name; a protocol's steps always name a block or
    are none of these)."""
    return action["actor"] != DEVICE and action["step"] in HOST_CALLS


def _books(who: str, before: dict, after: dict) -> str:
    """What a host call did to the allocator's books, as it reports them:
    refcounts, blocks it took from its free list, and other branches'
    tables that changed under them."""
    changes = [f"block {b['id']} from {a['refcount']} to {b['refcount']}"
               for a, b in zip(before["blocks"], after["blocks"]) if a["refcount"] != b["refcount"]]
    text = "The allocator's refcounts: " + ", ".join(changes) if changes else "No refcount changes"
    pins = [f"block {b['id']} from {a['holds']} to {b['holds']}"
            for a, b in zip(before["blocks"], after["blocks"]) if a["holds"] != b["holds"]]
    if pins:        # holds(): the references that are the allocator's own
        text += "; its own references (holds): " + ", ".join(pins)
    taken = [b for b in before["free"] if b not in after["free"]]
    if taken:
        text += f" ({_blocks(taken)} taken from the free list)"
    text += "."
    for name, was in before["branches"].items():
        now = after["branches"][name]
        if name != who and was["status"] == now["status"] == "running" and was["working"] != now["working"]:
            text += f" {name}'s table changes too, from {was['working']} to {now['working']}."
    return text


def _copies(binds: dict, B: int) -> str:
    pairs = list(zip(binds.get("copy_src") or [], binds.get("copy_dst") or []))
    slots = f"all {B} slot{'s' if B != 1 else ''}"
    if not pairs:
        return "the allocator returns no copy"
    if len(pairs) == 1:
        return f"the allocator returns one copy, block {pairs[0][0]} → block {pairs[0][1]} ({slots}), launched first"
    listed = ", ".join(f"block {s} → block {d}" for s, d in pairs)
    return f"the allocator returns {len(pairs)} copies, {listed} ({slots} each), launched first in that order"


#: how a sentence about a block left on the free list begins (`_still_free`, `_consequences`)
STAYS_FREE = re.compile(r"Block (\d+) stays FREE")


def _still_free(who: str, binds: dict, after: dict) -> str:
    """Blocks the call put to use (a copy's destination, the branch's
    table) that the allocator still reports free: a bug in the making."""
    table = after["branches"][who]["working"]
    dsts = binds.get("copy_dst") or []
    out = ""
    for b in dict.fromkeys([*dsts, *table]):
        if b in after["free"]:
            roles = [role for role, yes in (("a copy's destination", b in dsts), (f"in {who}'s table", b in table)) if yes]
            out += f" Block {b} stays FREE: the allocator keeps it on its free list, though it is {' and '.join(roles)}."
    return out


def _kernel_in_flight(who: str, state: dict) -> Optional[dict]:
    return next((q["kernel"] for q in state["queue"] if "kernel" in q and q["kernel"]["branch"] == who), None)


def _host_words(action: dict, binds: dict, before: dict, after: Optional[dict]) -> str:
    """What a host call did, in words (docs/semantics.md#engine-harness):
    the call, then what followed from it in the same action."""
    who, op = action["actor"], action["op"]
    was = before["branches"][who]
    B = len(before["blocks"][0]["slots"]) if before["blocks"] else 1
    if "raised" in binds:
        failed = f"calls {binds['call']}, which raises {binds['raised']} — allocator-error: the allocator's own code fails, and no state follows"
        if op == "finish":
            return (f"{who} has finished: it checks its output, positions 0 to {was['pos'] - 1} read through its table "
                    f"{was['working']}, then {failed}.")
        if op == "cancel":
            return f"{who} is pruned: it {failed}."
        return f"{who} {failed}."
    if op == "cancel" and action["step"] == "cancel":
        return f"{who} is cancelled while it waits for admission: it owns nothing, so no call is made."
    if op == "admit":
        return _admit_words(who, binds, before, after, B)
    if op == "fence":
        assert after is not None
        done = (f"the copy of block {binds['src']} into block {binds['dst']} that {who}'s call returned has completed: "
                f"it calls copy_done({binds['src']}, {binds['dst']})" if action["step"] == "copy_done" else
                f"{who}'s kernel has completed: it calls kernel_done({who!r})")
        return f"The engine learns at a fence that {done}. {_books(who, before, after)}"
    if op == "append":
        token, pos, table = binds["token"], was["pos"], binds["table"]
        draft = ", draft" if "draft" in binds else ""
        call = f"{who} calls append({who!r}, {token!r}{draft}): {_copies(binds, B)}"
        if after is None:
            return (f"{call}; but its table {table} has no block for position {pos}: "
                    f"no kernel is launched (kernel-table-miss).")
        return (f"{call}; then {who}'s kernel for position {pos}, which writes {token} into block "
                f"{table[pos // B]}, slot {pos % B}, is launched through its table {table}. {_books(who, before, after)}"
                + _still_free(who, binds, after))
    assert after is not None
    me = after["branches"][who]
    if op == "fork":
        child = binds["child"]
        kid = after["branches"][child]
        same = f", the same blocks as {who}'s" if kid["working"] == me["working"] else f"; {who}'s table is now {me['working']}"
        return (f"{who} calls fork({who!r}, {child!r}): {child} is born with {who}'s sequence {_tokens(kid['sequence'])} "
                f"(pos {kid['pos']}) and its own table {kid['working']}{same}. {_books(who, before, after)}"
                + _still_free(child, binds, after))
    if op == "rollback":
        accepted, rejected = binds["accepted"], binds["rejected"]
        drafts = accepted + rejected
        if not rejected:
            return (f"The verifier accepts all {drafts} of {who}'s drafts; {who} calls rollback({who!r}, 0), with nothing to "
                    f"rewind: pos stays {me['pos']} and its table is {me['working']}. {_books(who, before, after)}")
        gone = _tokens(was["sequence"][-rejected:])
        kept = ("what the rejected draft's kernel wrote stays in its slot" if rejected == 1 else
                "what the rejected drafts' kernels wrote stays in their slots")
        return (f"The verifier accepts {accepted} of {who}'s {drafts} drafts; {who} calls rollback({who!r}, {rejected}): "
                f"it drops {gone}, its pos goes back to {me['pos']} and its table is now {me['working']} ({kept}, "
                f"as garbage past pos). {_books(who, before, after)}")
    if op == "finish":
        return (f"{who} has finished: it checks its output, positions 0 to {binds['pos'] - 1} read through its table "
                f"{binds['table']}, then calls free({who!r}). {_books(who, before, after)}")
    kernel = _kernel_in_flight(who, before)
    flight = (f", while its kernel for position {kernel['pos']} ({kernel['token']}) is still in flight"
              if kernel is not None else "")
    return f"{who} is pruned: it calls free({who!r}) with its table {binds['table']}{flight}. {_books(who, before, after)}"


def _admit_words(who: str, binds: dict, before: dict, after: Optional[dict], B: int) -> str:
    """An admission of allocator code (a cache scenario): the call, what it
    says the engine holds already, the copies, then the prefill."""
    computed, last, table, hits = binds["computed"], binds["to"], binds["table"], list(binds["hits"])
    held = (f"the engine holds {computed} of its {last + 1} prompt tokens already"
            + (f" (its hits: {_blocks(hits)}, the first entries of its table)" if hits else "") if computed else
            "the engine holds none of its prompt tokens")
    call = f"{who} is admitted: it calls admit({who!r}, its prompt): {held}; {_copies(binds, B)}"
    if after is None:
        return f"{call}; but its table {table} has no block for position {last}: no prefill is launched (kernel-table-miss)."
    prefill = (f"then its prefill kernel for positions {computed} to {last} is launched through its table {table}"
               if computed <= last else f"nothing is left to prefill; its table is {table}")
    return f"{call}; {prefill}. {_books(who, before, after)}" + _still_free(who, binds, after)


def _device_words(op: str, binds: dict, before: dict, after: dict) -> str:
    """What a device completion did, in one sentence."""
    if op in ("transfer-complete", "transfer-fail"):
        return _transfer_words(op, binds, before, after)
    if op == "copy-complete":
        return (f"The device completes the copy of block {binds['src']} into block {binds['dst']}: "
                f"block {binds['dst']} now holds {_slots(after['blocks'][binds['dst']]['slots'])}.")
    if "from" in binds:     # a prefill: several positions, perhaps several blocks
        frm, pos = binds["from"], binds["pos"]
        kernel = next((q["kernel"] for q in before["queue"]
                       if "kernel" in q and q["kernel"]["branch"] == binds["branch"] and q["kernel"]["pos"] == pos), None)
        tokens = f"{_tokens(kernel['expected'][frm:pos + 1])} " if kernel else ""
        return (f"The device completes {binds['branch']}'s prefill kernel: it writes {tokens}(positions {frm} to {pos}) "
                f"into {_blocks(list(binds['blocks']))}, then reads positions 0 to {pos} through its snapshot.")
    return (f"The device completes {binds['branch']}'s kernel: it writes {binds['token']} into block "
            f"{binds['block']}, slot {binds['slot']}, then reads positions 0 to {binds['pos']} through its snapshot.")


def _consequences(before: dict, after: dict, harness: bool = False, told: frozenset[int] = frozenset()) -> str:
    """What an action did besides its own effect: blocks it freed, increments
    of a block that stayed free (but not of those in `told`, which the
    action's own words already say stay free), children cancelled with
    their parent. (The order of allocator code's free list is its own:
    nothing is said of which block comes next.)"""
    out = ""
    freed = [block for block in after["free"] if block not in before["free"]]
    if harness and freed:
        out += (f" Block {freed[0]} is now FREE: it is" if len(freed) == 1 else
                f" Blocks {_names([str(b) for b in freed])} are now FREE: they are") + " on the allocator's free list."
    for block in after["free"]:
        if block not in before["free"]:
            if harness:
                continue
            key = after["blocks"][block].get("key")
            first = " and will be the next one allocated" if after["free"][0] == block else ""
            if key:
                out += (f" Block {block} is now FREE but stays cached under {key_text(key)}: a later request may hit it "
                        f"until an allocation evicts it{first.replace(' and will', '; it will')}.")
                continue
            out += f" Block {block} is now FREE: it is back on the free list{first}."
        elif after["blocks"][block]["refcount"] > before["blocks"][block]["refcount"] and block not in told:
            out += (f" Block {block} stays FREE: its refcount rose, yet the allocator keeps it on its free list." if harness else
                    f" Block {block} stays FREE: an increment does not take a block off the free list.")
    for name, br in after["branches"].items():
        if before["branches"][name]["status"] == "unborn" and br["status"] == "cancelled":
            out += f" {name}, never forked, is cancelled with it."
    return out


def action_words(action: dict, before: dict, after: Optional[dict], scenario: Optional[dict] = None) -> str:
    """The action of one step (JSON forms) as a sentence a person can follow
    without knowing the step language, with what else it caused (`scenario`,
    JSON form: a cache scenario's lookup names the request's prompt)."""
    binds = {k: list(v) if isinstance(v, tuple) else v for k, v in action["binds"].items()}   # as in a file
    if is_host_call(action):
        words = _host_words(action, binds, before, after)
        if after is None:
            return words
        return words + _consequences(before, after, True, frozenset(int(b) for b in STAYS_FREE.findall(words)))
    if after is None:
        if action["step"] == "prefill":
            table = before["branches"][action["actor"]]["published"]
            return (f"{action['actor']} tries to launch its prefill of positions {binds['from']} to {binds['to']}, but its "
                    f"published table {table} does not cover them: no kernel is launched.")
        return f"{action['actor']} tries to write, but its published table does not cover the position: no kernel is launched."
    if action["actor"] == ENGINE or action["step"] in ("add", "abort"):      # the scheduler harness's calls
        sentence = _scheduler_words(action, binds)
    elif action["actor"] == DEVICE:
        sentence = _device_words(action["op"], binds, before, after)
    elif action["actor"] == CONNECTOR:
        sentence = _connector_words(action, binds, before, after)
    else:
        specs = dict(zip(BRANCH_NAMES, (scenario or {}).get("branch", [])))
        sentence = _branch_words(action["actor"], action["step"], binds, before, after, specs.get(action["actor"]))
    return sentence + _consequences(before, after)


def _scheduler_words(action: dict, binds: dict) -> str:
    """A call of scheduler code (docs/semantics.md#scheduler-harness): what
    the scheduler was told or returned, in its own terms."""
    step = action["step"]
    if step == "add":
        return f"{action['actor']} arrives (add); its block table is {binds.get('table')}."
    if step == "abort":
        return f"{action['actor']} is aborted (abort); its block table is now {binds.get('table')}."
    if "raised" in binds:
        return f"The engine calls {binds['call']}, which raises {binds['raised']}."
    if step == "schedule":
        parts = [f"kernels {', '.join(binds['kernels'])}" if binds.get("kernels") else "",
                 f"transfers {', '.join(binds['transfers'])}" if binds.get("transfers") else "",
                 f"copies {binds['copy_src']} -> {binds['copy_dst']}" if binds.get("copy_src") else "",
                 f"its kernels wait for {', '.join(binds['waits'])}, in flight" if binds.get("waits") else ""]
        launched = "; ".join(p for p in parts if p)
        return f"The scheduler plans a step: {launched or 'nothing to launch (a poll for completions)'}."
    done = ", ".join(binds.get("done") or []) or "no transfer"
    finished = ", ".join(binds.get("finished") or [])
    return (f"The engine hands the oldest step's output to the scheduler: sampled {', '.join(binds.get('sampled') or []) or 'nothing'}, "
            f"completed {done}" + (f"; {finished} finished." if finished else "."))


def describe(witness: dict) -> str:
    """What the invariant expected and what happened, in one sentence."""
    if "expected_sequence" in witness:      # faithful-output (cache-immutable's witness has an `expected` too)
        via = witness.get("via")
        where = (f"branch {witness['branch']}'s kernel for position {witness['pos']} read through snapshot {witness['snapshot']}"
                 if via == "kernel" else
                 f"the remote reader of branch {witness['branch']}'s send of block {witness.get('block')}" if via == "send" else
                 f"branch {witness['branch']}'s check-output read through its working table {witness.get('table')}")
        return (f"{where}: at position {witness['position']} it expected {token(witness['expected'])} and read {token(witness['read'])}"
                f" (expected {' '.join(map(token, witness['expected_sequence']))}, read {' '.join(map(token, witness['read_sequence']))})")
    return witness.get("message", str(witness))


def against_reference(decoded: Optional[str], expected: Optional[str], max_diff: Optional[float], kind: str = "kernel") -> str:
    """What the token a kernel (or a check-output) gave on a real KV pool
    is beside its reference's, said right after that token: another token,
    or the same token whose output still moved (a wrong token elsewhere in
    its context), which is no less a divergence."""
    off = None if not max_diff else f"{max_diff:.3f}" if max_diff >= 0.001 else f"{max_diff:.1e}"
    if decoded == expected:
        return ", the same token as the reference" + (f", off by {off} (max |diff|)" if off else "")
    has = "has" if kind == "check-output" else "decodes"
    return f" where the reference {has} {token(expected)}" + (f" (max |diff| {off})" if off else "")
