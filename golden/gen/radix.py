#!/usr/bin/env python3
"""Golden traces for radix: SGLang's radix prefix cache, as a plain-Python model.

Independent of the C code (reference/radix.c, lab/radix/radix.c): it is written from
lab/CONTRACTS.md section 4 and SGLang's RadixCache, so the C reference is itself tested.
Plain Python 3, no third-party packages.

A case is golden/radix/<case>/ with meta.json and trace.jsonl, one op a line:
    {"op":"insert","key":[..],"expect":P}   P = tokens of the (page-cut) key already cached
    {"op":"match","key":[..],"expect":M}    M = longest cached prefix
    {"op":"lock","key":[..]}  {"op":"unlock","key":[..]}
    {"op":"evict","tokens":N,"expect":E}    E = tokens freed
    {"op":"size","expect":{"total":T,"evictable":V}}

Semantics (lab/CONTRACTS.md section 4; what it leaves open is marked * and derived from SGLang):
- keys are cut to whole pages; children are told apart by their first page; a match inside
  a node counts whole pages only;
- match/insert/lock/unlock walk the longest cached prefix, splitting the node where it ends
  inside one; insert hangs the rest of the key under the walk's last node as one leaf;
- the clock ticks once per op line; every node a walk enters is stamped with the new time,
  and so is a new leaf;
- a split makes the prefix half a new node with a copy of the lock count; the suffix half
  keeps the original node's lock count and children; both halves carry the op's time;
- evict frees unlocked leaves, least recently stamped first, until >= N tokens are freed or
  none is left; a parent left childless and unlocked is a leaf from then on (evictable in the
  same call);
- * ties: one op stamps several nodes with one time, so "least recently" needs an order
  among them. SGLang's RadixCache has none to offer as a rule: its clock is time.monotonic(),
  read once per node as the op reaches it, so within one op the nodes are stamped in the
  order the op reaches them: the walk from the root down (in _match_prefix_helper and
  _insert_helper each child's last_access_time is set as the walk enters it, before any
  split of it), then a split's new prefix node (TreeNode() stamps itself when _split_node
  creates it), then insert's new leaf (created last). Eviction compares those times, so a
  node stamped earlier in the same op is the less recent. The rule here is that order:
  every stamp is (the op's time, the stamp's place in the op), compared in that order.
  Which leaves can tie: the nodes one op stamps lie on one path from the root, except
  insert's new leaf and the suffix half of the split it made, which are siblings; any other
  two are ancestor and descendant, never both leaves. So the rule decides one case: the
  suffix half, stamped by the walk before the split, goes before the new leaf
  (tie_suffix_before_new_leaf).
- size: total tokens, and tokens in nodes whose lock count is zero (root excluded).

Run: python3 golden/gen/radix.py   (then the manifest: bash golden/gen/manifest.sh)
"""
import json
import os
import random
import shutil

GEN = "golden/gen/radix.py"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Node:
    def __init__(self, tokens, parent, lock=0):
        self.tokens = list(tokens)
        self.parent = parent
        self.children = {}  # first page (tuple) -> Node
        self.lock = lock
        self.stamp = (0, 0)  # (the op's time, the stamp's place among all stamps so far)


class RadixCache:
    def __init__(self, page_size):
        self.page = page_size
        self.root = Node([], None)
        self.clock = 0
        self.stamps = 0

    def _stamp(self, node):
        """Stamps node with the current op's time, after every node stamped before it."""
        self.stamps += 1
        node.stamp = (self.clock, self.stamps)

    def _cut(self, key):
        return list(key[: len(key) - len(key) % self.page])

    def _first_page(self, tokens):
        return tuple(tokens[: self.page])

    def _common_pages(self, a, b):
        n = 0
        while n < len(a) and n < len(b) and a[n] == b[n]:
            n += 1
        return n - n % self.page

    def _split(self, child, at):
        """child (already stamped by the walk) keeps the suffix; the prefix is a new node,
        stamped after it."""
        prefix = Node(child.tokens[:at], child.parent, child.lock)
        self._stamp(prefix)
        child.parent.children[self._first_page(child.tokens)] = prefix
        child.tokens = child.tokens[at:]
        child.parent = prefix
        prefix.children[self._first_page(child.tokens)] = child
        return prefix

    def _walk(self, key):
        node, done = self.root, 0
        while done < len(key):
            child = node.children.get(self._first_page(key[done:]))
            if child is None:
                break
            self._stamp(child)
            m = self._common_pages(child.tokens, key[done:])
            done += m
            if m < len(child.tokens):
                node = self._split(child, m)
                break
            node = child
        return done, node

    def _path(self, node):
        while node is not self.root:
            yield node
            node = node.parent

    def insert(self, key):
        key = self._cut(key)
        self.clock += 1
        done, node = self._walk(key)
        if done < len(key):
            leaf = Node(key[done:], node)
            self._stamp(leaf)
            node.children[self._first_page(leaf.tokens)] = leaf
        return done

    def match(self, key):
        key = self._cut(key)
        self.clock += 1
        return self._walk(key)[0]

    def lock(self, key):
        key = self._cut(key)
        self.clock += 1
        done, node = self._walk(key)
        for x in self._path(node):
            x.lock += 1
        return done

    def unlock(self, key):
        key = self._cut(key)
        self.clock += 1
        done, node = self._walk(key)
        path = list(self._path(node))
        assert all(x.lock > 0 for x in path), "generator bug: unlock of a path holding no lock"
        for x in path:
            x.lock -= 1
        return done

    def _nodes(self):
        stack = list(self.root.children.values())
        while stack:
            x = stack.pop()
            yield x
            stack.extend(x.children.values())

    def evict(self, tokens):
        self.clock += 1
        freed = 0
        while freed < tokens:
            leaves = [x for x in self._nodes() if not x.children and x.lock == 0]
            if not leaves:
                break
            victim = min(leaves, key=lambda x: x.stamp)
            del victim.parent.children[self._first_page(victim.tokens)]
            freed += len(victim.tokens)
        return freed

    def size(self):
        self.clock += 1
        total = sum(len(x.tokens) for x in self._nodes())
        evictable = sum(len(x.tokens) for x in self._nodes() if x.lock == 0)
        return {"total": total, "evictable": evictable}


class Trace:
    """Runs ops on the model and records each with its expectation."""

    def __init__(self, page_size):
        self.cache = RadixCache(page_size)
        self.lines = []

    def _add(self, obj):
        self.lines.append(json.dumps(obj, separators=(",", ":")))

    def insert(self, key):
        self._add({"op": "insert", "key": list(key), "expect": self.cache.insert(key)})

    def match(self, key):
        self._add({"op": "match", "key": list(key), "expect": self.cache.match(key)})

    def lock(self, key):
        self.cache.lock(key)
        self._add({"op": "lock", "key": list(key)})

    def unlock(self, key):
        self.cache.unlock(key)
        self._add({"op": "unlock", "key": list(key)})

    def evict(self, tokens):
        self._add({"op": "evict", "tokens": tokens, "expect": self.cache.evict(tokens)})

    def size(self):
        self._add({"op": "size", "expect": self.cache.size()})


def write_case(name, page_size, seed, trace):
    d = os.path.join(ROOT, "radix", name)
    if os.path.isdir(d):
        shutil.rmtree(d)
    os.makedirs(d)
    meta = {"module": "radix", "case": name, "dtype": "i4", "params": {"page_size": page_size}, "seed": seed,
            "generator": GEN, "reference": "python"}
    with open(os.path.join(d, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")
    with open(os.path.join(d, "trace.jsonl"), "w") as f:
        f.write("\n".join(trace.lines) + "\n")


# ---- hand-written cases: each shows one rule ----

def basic_page1():
    t = Trace(1)
    t.match([1, 2, 3])          # empty tree: 0
    t.insert([1, 2, 3])         # 0 cached before
    t.insert([1, 2, 3])         # all 3 cached
    t.match([1, 2, 3, 4, 5])    # 3
    t.match([9])                # 0
    t.insert([1, 2, 3, 4, 5])   # extends the leaf: 3 cached
    t.match([1, 2, 3, 4, 5, 6]) # 5
    t.insert([7, 8])
    t.size()                    # 7 tokens, all evictable
    t.evict(1)                  # LRU leaf first
    t.size()
    t.evict(100)                # everything left
    t.size()
    return t


def split_page1():
    t = Trace(1)
    t.insert([1, 2, 3, 4, 5, 6])
    t.match([1, 2, 3])          # ends inside the node: split at 3 -> [1,2,3] + [4,5,6]
    t.insert([1, 2, 3, 9, 9])   # hangs [9,9] under the prefix half: 3 cached
    t.insert([1, 2, 7])         # splits [1,2,3] at 2
    t.match([1, 2, 3, 4, 5, 6, 7])
    t.match([1, 2, 3, 4])       # splits [4,5,6] at 1
    t.size()
    t.evict(1)                  # the least recently stamped leaf
    t.match([1, 2, 3, 4, 5, 6])
    t.evict(3)
    t.size()
    t.lock([1, 2, 3, 4])        # lock splits nothing new, walks 4 tokens
    t.evict(100)
    t.size()
    t.unlock([1, 2, 3, 4])
    t.evict(100)
    t.size()
    return t


def split_stamps_both_halves():
    t = Trace(1)
    t.insert([1, 2, 3, 4])      # t1
    t.insert([9, 9])            # t2
    t.match([1, 2])             # t3: splits [1,2,3,4]; the suffix [3,4] is stamped t3 too
    t.evict(2)                  # so [9,9] (t2) is the least recent leaf, not [3,4]
    t.match([1, 2, 3, 4])       # 4: [3,4] survived
    t.match([9, 9])             # 0
    t.lock([1, 2, 3, 4])        # locks [1,2] and [3,4]
    t.match([1, 2, 3])          # splits the locked [3,4]: both halves keep one reference
    t.size()                    # nothing evictable
    t.unlock([1, 2, 3, 4])      # walks [1,2], [3], [4]: each had its reference
    t.size()
    t.evict(100)
    t.size()
    return t


def split_page4():
    t = Trace(4)
    a = [10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21]
    t.insert(a + [99, 98])      # cut to 12 tokens (3 pages)
    t.match(a[:6])              # cut to 4: splits after the first page
    t.match(a[:8] + [0, 0])     # 8
    t.match(a[:5] + [0] + a[6:])  # differs in page 2: whole pages only -> 4
    t.insert(a[:7] + [0] + [1, 2, 3, 4])  # differs at the last token of page 2: 4 cached
    t.insert([10, 11, 12, 0] + a[4:])     # differs inside the FIRST page: a new child of the root
    t.match([10, 11, 12, 0, 14, 15, 16, 17])
    t.match([10, 11, 12])       # shorter than a page: 0
    t.size()
    t.evict(4)
    t.size()
    t.lock(a)
    t.evict(1000)
    t.size()
    t.unlock(a)
    t.evict(5)                  # one leaf of 4 is not enough: frees a second
    t.size()
    return t


def last_token(page):
    t = Trace(page)
    base = [(i * 37 + 5) % 101 for i in range(64)]
    t.insert(base)
    for n in (page, 2 * page, 16, 33, 63, 64):
        n -= n % page
        key = base[:n - 1] + [base[n - 1] + 1]  # differs only at the last token
        t.match(key)
        t.insert(key)
        t.match(base[:n])
    t.size()
    t.evict(1)
    t.evict(page)
    t.size()
    return t


def empty_keys(page):
    t = Trace(page)
    t.size()
    t.evict(0)
    t.evict(10)                 # empty tree: frees nothing
    t.match([])
    t.insert([])                # nothing to add
    t.lock([])
    t.unlock([])
    t.size()
    t.insert([5] * (page - 1) if page > 1 else [5])
    t.match([5] * (page - 1) if page > 1 else [5])
    t.insert([1, 2, 3, 4, 5, 6, 7, 8])
    t.match([1, 2, 3, 4, 5, 6, 7, 8][: page - 1] if page > 1 else [])
    t.evict(0)                  # asks for nothing: frees nothing
    t.size()
    return t


def locked_survive_evict():
    t = Trace(1)
    sys = [100, 101, 102, 103]
    t.insert(sys + [1, 1])
    t.insert(sys + [2, 2])
    t.insert(sys + [3, 3, 3])
    t.lock(sys + [2, 2])        # a running request: its whole path
    t.size()                    # locked tokens are not evictable
    t.evict(1000)               # frees the other leaves only; sys survives (locked)
    t.size()
    t.match(sys + [2, 2, 9])
    t.lock(sys + [2, 2])        # a second reference on the same path
    t.unlock(sys + [2, 2])
    t.evict(1000)               # still one reference: nothing freed
    t.size()
    t.unlock(sys + [2, 2])
    t.size()
    t.evict(2)                  # the leaf [2,2] goes...
    t.size()
    t.evict(1)                  # ...and then sys, a leaf from then on
    t.size()
    return t


def parents_become_leaves():
    t = Trace(1)
    t.insert([1, 2, 3, 4])
    t.insert([1, 2, 5, 6])      # [1,2] -> {[3,4], [5,6]}
    t.insert([1, 2, 5, 7])      # [5,6] splits: [5] -> {[6], [7]}
    t.insert([8, 9])
    t.match([8, 9])             # [8,9] is now the most recent
    t.evict(3)                  # [3,4] first; then [6] (older of [6],[7])... until 3 freed
    t.size()
    t.evict(2)                  # [7]; then [5] is a childless parent: a leaf, evicted in the same call
    t.size()
    t.evict(2)                  # [1,2] (stamped before [8,9]) is next
    t.size()
    t.evict(100)
    t.size()
    return t


def lru_order():
    t = Trace(1)
    keys = [[i, i + 1, i + 2] for i in range(0, 50, 10)]
    for k in keys:
        t.insert(k)
    t.match(keys[0])            # touch the oldest: now the newest
    t.match(keys[2] + [99])
    t.lock(keys[3])
    t.unlock(keys[3])           # lock and unlock stamp too
    for _ in range(5):
        t.evict(1)              # one leaf at a time: 1, 4, 0, 2, 3
        t.size()
    return t


def tie_suffix_before_new_leaf():
    t = Trace(2)
    t.insert([1, 2, 3, 4])
    t.insert([1, 2, 5, 6])      # one op stamps both [3,4] (split suffix) and the new leaf [5,6]
    t.evict(1)                  # the tie: [3,4] was stamped first (by the walk, before the split)
    t.match([1, 2, 3, 4])
    t.match([1, 2, 5, 6])
    t.insert([7, 7, 1, 1])
    t.insert([7, 7, 2, 2])
    t.match([1, 2, 5, 6])       # refresh [1,2] and [5,6]: the oldest leaves are now [1,1] and [2,2]
    t.evict(2)                  # same op time: [1,1], stamped by the walk before [2,2] was made, goes
    t.match([7, 7, 1, 1])
    t.size()
    return t


def large_token_ids():
    """Ids use all 32 bits (Llama 3's vocabulary is 128k: 16-bit ids are a real bug), and the
    extremes of int32; ids equal modulo 2^16 must still differ."""
    t = Trace(1)
    big = [2147483647, -2147483648, -1, 0, 128255, 65536 + 5, 5]
    t.insert(big)
    t.match(big)
    t.match(big[:5] + [5])             # 65541 vs 5: equal in the low 16 bits only
    t.match([2147483647, -2147483648, -1, 0, 128255 + 65536])
    t.insert([70000, 5, 131077])
    t.match([70000, 5, 5])             # 2
    t.match([70000 - 65536, 5, 131077])  # 0: the first token differs in bit 16
    t.size()
    return t


def long_keys():
    t = Trace(1)
    rng = random.Random(5)
    base = [rng.randrange(-2**31, 2**31) for _ in range(300)]
    t.insert(base)
    for at in (0, 1, 7, 8, 31, 32, 33, 127, 128, 255, 298, 299):
        key = list(base)
        key[at] ^= 1 << (at % 31)      # differ in one bit, low or high
        t.match(key)
        t.insert(key[: at + 1 + (at % 5)])
    t.match(base)
    t.size()
    t.evict(400)
    t.size()
    return t


def random_ops(page, seed, nops):
    """Requests that share prefixes (a small alphabet, a few documents): splits and
    divergences at page boundaries are common; running requests are locked until they end."""
    rng = random.Random(seed)
    alphabet = [0, 65536, 1, -7, 2147483647, 3]
    vocab = alphabet[: 2 + seed % 4]
    docs = [[rng.choice(vocab) for _ in range(rng.randrange(0, 40))] for _ in range(6)]
    t = Trace(page)
    running = []
    while len(t.lines) < nops:
        doc = rng.choice(docs)
        key = doc[: rng.randrange(0, len(doc) + 1)]
        if key and rng.random() < 0.25:
            key[rng.randrange(len(key))] = rng.choice(vocab)
        if rng.random() < 0.25:
            key += [rng.choice(vocab) for _ in range(rng.randrange(1, 10))]
        r = rng.random()
        if r < 0.30:
            t.insert(key)
            if rng.random() < 0.4 and len(running) < 6:
                t.lock(key)     # a key just inserted is cached whole: its unlock walks the same path
                running.append(key)
        elif r < 0.55:
            t.match(key)
        elif r < 0.68 and running:
            t.unlock(running.pop(rng.randrange(len(running))))
        elif r < 0.82:
            t.evict(rng.choice([0, 1, page, 3 * page, 10, 25, 1000]))
        else:
            t.size()
    for key in running:
        t.unlock(key)
    t.size()
    t.evict(10 ** 6)
    t.size()
    return t


CASES = [
    ("basic_page1", 1, 0, basic_page1),
    ("split_page1", 1, 0, split_page1),
    ("split_page4", 4, 0, split_page4),
    ("split_stamps_both_halves", 1, 0, split_stamps_both_halves),
    ("last_token_page1", 1, 0, lambda: last_token(1)),
    ("last_token_page4", 4, 0, lambda: last_token(4)),
    ("empty_keys_page1", 1, 0, lambda: empty_keys(1)),
    ("empty_keys_page4", 4, 0, lambda: empty_keys(4)),
    ("locked_survive_evict", 1, 0, locked_survive_evict),
    ("parents_become_leaves", 1, 0, parents_become_leaves),
    ("lru_order", 1, 0, lru_order),
    ("tie_suffix_before_new_leaf", 2, 0, tie_suffix_before_new_leaf),
    ("large_token_ids", 1, 0, large_token_ids),
    ("long_keys_page1", 1, 5, long_keys),
    ("random_page1", 1, 11, lambda: random_ops(1, 11, 400)),
    ("random_page4", 4, 12, lambda: random_ops(4, 12, 400)),
    ("random_page16", 16, 13, lambda: random_ops(16, 13, 300)),
]


def main():
    for name, page, seed, make in CASES:
        write_case(name, page, seed, make())
        print("wrote golden/radix/%s" % name)


if __name__ == "__main__":
    main()
