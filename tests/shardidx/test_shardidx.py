#!/usr/bin/python3
"""shardidx tests: archives from GNU tar, bsdtar and Python's tarfile are
indexed by shardidx_dump and compared, entry by entry, with what GNU tar
extracts from them; plus hostile names, damaged archives and fuzzing.

Usage: test_shardidx.py --dump PATH/TO/shardidx_dump TEST
TEST: formats | sparse | names | damage | compat | fuzz | idxfuzz | leftout | all
Standard library only. Prints the seed of every random choice.
"""
import argparse
import hashlib
import io
import json
import os
import random
import re
import stat
import subprocess
import sys
import tarfile
import tempfile

DUMP = None
EBADMSG = -74
EIO = -5
EBADMSG = -74
U32 = 2**32 - 1
FAILS = []
CHECKS = [0]  # checks made: a run that made none fails (as every test of the suite)


def fail(msg):
    FAILS.append(msg)
    print("FAIL: " + msg, flush=True)


def check(cond, msg):
    CHECKS[0] += 1
    if not cond:
        fail(msg)
    return cond


def sh(args, ok=(0,), **kw):
    p = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)
    if p.returncode not in ok:
        raise RuntimeError("%s exited %d: %s" % (args, p.returncode, p.stderr.decode(errors="replace")))
    return p


def dump(path):
    """Run shardidx_dump; returns ({path_bytes: entry}, info, samples, entries_list)."""
    p = subprocess.run([DUMP, path], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if p.returncode != 0:
        raise RuntimeError("shardidx_dump %s exited %d:\n%s" % (path, p.returncode, p.stderr.decode(errors="replace")))
    ents, lst, info, samples = {}, [], None, []
    for line in p.stdout.decode("ascii").splitlines():
        o = json.loads(line)
        if "info" in o:
            info = o["info"]
        elif "sample" in o:
            samples.append(tuple(o["sample"]))
        else:
            o["path"] = o["path"].encode("latin-1")
            o["canon"] = o["canon"].encode("latin-1")
            if "link" in o:
                o["link"] = o["link"].encode("latin-1")
            ents[o["path"]] = o
            lst.append(o)
    return ents, info, samples, lst


def clamp(t):
    return max(0, min(U32, int(t // 1)))


def sha(b):
    return hashlib.sha256(b).hexdigest()


def walk(root):
    """{relative path bytes: lstat} of an extracted tree."""
    out = {}
    rb = os.fsencode(root)
    for d, dirs, files in os.walk(rb):
        for n in dirs + files:
            full = os.path.join(d, n)
            out[os.path.relpath(full, rb)] = os.lstat(full)
    return out


def compare_extract(tarpath, label, tar_ok=(0,), dir_mtime=True):
    """Index tarpath, extract it with GNU tar, compare everything.

    dir_mtime=False: GNU tar restores a directory's mtime when it leaves the
    directory, so an archive that lists a directory's members far after the
    directory (bsdtar writes all directories first) extracts with new
    directory mtimes; those are not compared then."""
    ents, info, samples, lst = dump(tarpath)
    raw = open(tarpath, "rb").read()
    with tempfile.TemporaryDirectory(prefix="shardidx-x-") as x:
        sh(["tar", "-xpf", tarpath, "-C", x, "--no-same-owner"], ok=tar_ok)
        tree = walk(x)
        check(info["damage"] == 0, "%s: damage %d at %d" % (label, info["damage"], info["damage_off"]))
        check(set(tree) == set(ents), "%s: path sets differ: only extracted %s; only indexed %s" % (
            label, sorted(set(tree) - set(ents))[:5], sorted(set(ents) - set(tree))[:5]))
        inodes = {}
        for p, st in tree.items():
            e = ents.get(p)
            if e is None:
                continue
            full = os.path.join(os.fsencode(x), p)
            what = "%s: %r" % (label, p)
            if stat.S_ISDIR(st.st_mode):
                if not check(e["type"] == "dir", what + ": type %s, want dir" % e["type"]):
                    continue
                check(e["nlink"] == st.st_nlink, what + ": dir nlink %d want %d" % (e["nlink"], st.st_nlink))
                if not e["flags"] & 4:  # explicit directories keep mode and mtime
                    check(e["mode"] == stat.S_IMODE(st.st_mode), what + ": mode %o want %o" % (e["mode"], stat.S_IMODE(st.st_mode)))
                    if dir_mtime:
                        check(e["mtime"] == clamp(st.st_mtime), what + ": mtime %d want %d" % (e["mtime"], clamp(st.st_mtime)))
            elif stat.S_ISLNK(st.st_mode):
                if not check(e["type"] == "symlink", what + ": type %s, want symlink" % e["type"]):
                    continue
                check(e.get("link") == os.readlink(full), what + ": link %r want %r" % (e.get("link"), os.readlink(full)))
                check(e["size"] == len(os.readlink(full)), what + ": symlink size")
            elif stat.S_ISREG(st.st_mode):
                if not check(e["type"] == "file", what + ": type %s, want file" % e["type"]):
                    continue
                data = open(full, "rb").read()
                check(e["size"] == len(data), what + ": size %d want %d" % (e["size"], len(data)))
                check(e["mode"] == stat.S_IMODE(st.st_mode), what + ": mode %o want %o" % (e["mode"], stat.S_IMODE(st.st_mode)))
                check(e["mtime"] == clamp(st.st_mtime), what + ": mtime %d want %d" % (e["mtime"], clamp(st.st_mtime)))
                check(e.get("sha256") == sha(data), what + ": content hash differs")
                check(e["nlink"] == st.st_nlink, what + ": nlink %d want %d" % (e["nlink"], st.st_nlink))
                if not e["flags"] & 1:
                    stored = raw[e["data_off"]:e["data_off"] + e["size"]]
                    check(stored == data, what + ": bytes at data_off %d differ" % e["data_off"])
                inodes.setdefault(st.st_ino, set()).add(e["canon"])
            else:
                fail(what + ": unexpected file type")
        for ino, canons in inodes.items():
            check(len(canons) == 1, "%s: one inode, several canons %s" % (label, canons))
        check(len(inodes) == len({e["canon"] for e in lst if e["type"] == "file"}),
              "%s: hardlink groups differ from extracted inodes" % label)
    # Samples cover every non-directory entry once.
    covered = sorted(i for f, n in samples for i in range(f, f + n))
    check(covered == [e["i"] for e in lst if e["type"] != "dir"], "%s: samples do not cover the members" % label)
    check(info["nentries"] == len(lst), "%s: nentries" % label)
    print("ok %-40s %4d entries %4d samples" % (label, len(lst), len(samples)), flush=True)
    return ents, info, samples


# ---- source trees --------------------------------------------------------------

def write(path, data, mode=0o644, mtime=1_600_000_000):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    os.chmod(path, mode)
    os.utime(path, (mtime, mtime))


def make_tree(root, rnd, long_names=True):
    """A tree with every kind of member; returns nothing, files under root/t."""
    t = os.path.join(root, "t")
    os.makedirs(t)
    for i in range(6):  # WebDataset-like samples
        key = "n%05d_%d" % (1440 + i, i * 7)
        write(os.path.join(t, "train", key + ".jpg"), rnd.randbytes(rnd.randrange(1, 3000)))
        write(os.path.join(t, "train", key + ".cls"), b"%d\n" % i)
    for n, sz in (("empty", 0), ("one", 1), ("b511", 511), ("b512", 512), ("b513", 513), ("big", 100_000)):
        write(os.path.join(t, "sizes", n), rnd.randbytes(sz))
    write(os.path.join(t, "modes", "m600"), b"600", 0o600)
    write(os.path.join(t, "modes", "m755"), b"755", 0o755)
    write(os.path.join(t, "modes", "m4755"), b"4755", 0o4755)
    os.makedirs(os.path.join(t, "emptydir"))
    os.chmod(os.path.join(t, "emptydir"), 0o700)
    os.symlink("../sizes/one", os.path.join(t, "modes", "rel-link"))
    os.symlink("/etc/passwd", os.path.join(t, "abs-link"))
    os.link(os.path.join(t, "sizes", "b513"), os.path.join(t, "hard-b513"))
    os.link(os.path.join(t, "sizes", "b513"), os.path.join(t, "modes", "hard2"))
    if long_names:
        d = os.path.join(t, "L" * 120, "M" * 200)  # > 255 total
        write(os.path.join(d, "N" * 150 + ".txt"), b"long name\n")
        os.symlink("T" * 180 + "/target", os.path.join(t, "long-target-link"))
        os.link(os.path.join(d, "N" * 150 + ".txt"), os.path.join(t, "hard-to-long"))
    for p in (t, os.path.join(t, "train"), os.path.join(t, "modes"), os.path.join(t, "sizes")):
        os.utime(p, (1_500_000_000, 1_500_000_000))
    return t


def short_tree(root, rnd):
    """Names that fit v7/ustar limits (v7: 99 bytes, no long targets)."""
    t = os.path.join(root, "t")
    os.makedirs(t)
    for i in range(4):
        write(os.path.join(t, "s", "k%d.jpg" % i), rnd.randbytes(rnd.randrange(0, 2000)))
        write(os.path.join(t, "s", "k%d.txt" % i), b"%d" % i, 0o600)
    write(os.path.join(t, "x", "m4755"), b"suid", 0o4755)
    os.symlink("../s/k1.jpg", os.path.join(t, "x", "ln"))
    os.link(os.path.join(t, "s", "k2.jpg"), os.path.join(t, "x", "hard"))
    os.makedirs(os.path.join(t, "e"))
    return t


def tarfile_extras(path, fmt):
    """Python tarfile archive with base-256 and pax corner cases."""
    with tarfile.open(path, "w", format=fmt) as tf:
        def add(name, data=b"", **kw):
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            ti.mtime = kw.pop("mtime", 1_234_567_890)
            for k, v in kw.items():
                setattr(ti, k, v)
            tf.addfile(ti, io.BytesIO(data))
        add("dir/", type=tarfile.DIRTYPE, mode=0o750)
        add("dir/plain.txt", b"plain", mode=0o640)
        if fmt != tarfile.USTAR_FORMAT:
            add("dir/neg-mtime", b"neg", mtime=-1000)
            add("dir/huge-mtime", b"huge", mtime=2**33 + 5)
            add("dir/big-uid", b"uid", uid=2**40, gid=2**35)
        if fmt == tarfile.PAX_FORMAT:
            add("dir/ünïcødé/файл.txt", b"unicode")
            add("dir/frac-mtime", b"frac", mtime=1_500_000_000.75)
            add("dir/" + "p" * 200 + "/" + "q" * 200, b"long pax path")
        add("dir/link", type=tarfile.SYMTYPE, linkname="plain.txt")
        add("dir/hard", type=tarfile.LNKTYPE, linkname="dir/plain.txt")


def base256_archive(path):
    """ustar archive whose size field is base-256 (hand-built)."""
    data = b"base-256 size field\n" * 50
    h = bytearray(512)
    h[0:8] = b"b256.txt"
    h[100:108] = b"0000644\0"
    h[108:116] = b"0000000\0"
    h[116:124] = b"0000000\0"
    h[124:136] = b"\x80" + len(data).to_bytes(11, "big")
    h[136:148] = b"13000000000\0"
    h[156:157] = b"0"
    h[257:263] = b"ustar\0"
    h[263:265] = b"00"
    h[148:156] = b" " * 8
    h[148:156] = b"%06o\0 " % sum(h)
    with open(path, "wb") as f:
        f.write(bytes(h) + data + b"\0" * (-len(data) % 512) + b"\0" * 1024)


# ---- tests --------------------------------------------------------------------

def test_formats(work, rnd):
    src = os.path.join(work, "full")
    os.makedirs(src)
    make_tree(src, rnd)
    srcs = os.path.join(work, "short")
    os.makedirs(srcs)
    short_tree(srcs, rnd)
    n = 0
    for fmt in ("gnu", "oldgnu", "pax", "posix"):
        a = os.path.join(work, "gnutar-%s.tar" % fmt)
        sh(["tar", "--format=" + fmt, "-cf", a, "-C", src, "t"])
        compare_extract(a, "GNU tar --format=" + fmt)
        n += 1
    for fmt in ("ustar", "v7"):
        a = os.path.join(work, "gnutar-%s.tar" % fmt)
        sh(["tar", "--format=" + fmt, "-cf", a, "-C", srcs, "t"])
        compare_extract(a, "GNU tar --format=" + fmt)
        n += 1
    for fmt, tree in (("ustar", srcs), ("pax", src), ("gnutar", src), ("v7", srcs)):
        a = os.path.join(work, "bsdtar-%s.tar" % fmt)
        sh(["bsdtar", "--format", fmt, "-cf", a, "-C", tree, "t"])
        compare_extract(a, "bsdtar --format " + fmt, dir_mtime=False)
        n += 1
    for name, fmt, tree in (("USTAR", tarfile.USTAR_FORMAT, srcs), ("GNU", tarfile.GNU_FORMAT, src),
                            ("PAX", tarfile.PAX_FORMAT, src)):
        a = os.path.join(work, "py-%s.tar" % name)
        with tarfile.open(a, "w", format=fmt) as tf:
            tf.add(os.path.join(tree, "t"), arcname="t")
        compare_extract(a, "tarfile " + name)
        a = os.path.join(work, "py-extras-%s.tar" % name)
        tarfile_extras(a, fmt)
        # GNU tar exits 2 after warning about the odd times and ids, but extracts
        compare_extract(a, "tarfile extras " + name, tar_ok=(0, 2))
        n += 2
    # pax global header ('g') followed by members
    a = os.path.join(work, "py-global.tar")
    with tarfile.open(a, "w", format=tarfile.PAX_FORMAT, pax_headers={"comment": "global"}) as tf:
        tf.add(os.path.join(srcs, "t"), arcname="t")
    compare_extract(a, "tarfile PAX with a global header")
    a = os.path.join(work, "base256.tar")
    base256_archive(a)
    ents, _, _ = compare_extract(a, "hand-built base-256 size")
    check(ents[b"b256.txt"]["size"] == 1000, "base-256 size read as %d" % ents[b"b256.txt"]["size"])
    n += 2

    # Duplicates by appending: later copies win, type changes, hardlink targets replaced.
    d = os.path.join(work, "dup")
    write(os.path.join(d, "f"), b"first copy")
    write(os.path.join(d, "g"), b"file then symlink")
    write(os.path.join(d, "keep"), b"old target bytes")
    os.link(os.path.join(d, "keep"), os.path.join(d, "keeplink"))
    write(os.path.join(d, "p", "child"), b"child")
    a = os.path.join(work, "dup.tar")
    sh(["tar", "--format=gnu", "-cf", a, "-C", d, "f", "g", "keep", "keeplink", "p"])
    os.remove(os.path.join(d, "keep"))  # break the link: new bytes, new inode
    write(os.path.join(d, "f"), b"second, longer copy of f")
    write(os.path.join(d, "keep"), b"NEW target bytes")
    os.remove(os.path.join(d, "g"))
    os.symlink("f", os.path.join(d, "g"))
    sh(["tar", "--format=gnu", "-rf", a, "-C", d, "f", "g", "keep"])
    ents, _, _ = compare_extract(a, "tar -r duplicates")
    check(ents[b"f"]["size"] == 24, "later copy of f does not win")
    check(ents[b"g"]["type"] == "symlink", "type change file -> symlink lost")
    check(ents[b"keeplink"]["canon"] == b"keeplink" and not ents[b"keeplink"]["flags"] & 8,
          "hardlink whose target was replaced still claims it: %r" % ents[b"keeplink"])
    check(ents[b"keep"]["nlink"] == 1 and ents[b"keeplink"]["nlink"] == 1, "nlink after target replaced")
    n += 1
    # GNU incremental archive: directories are 'D' dumpdir members
    a = os.path.join(work, "incremental.tar")
    sh(["tar", "--format=gnu", "-g", os.path.join(work, "snap"), "-cf", a, "-C", srcs, "t"])
    check(open(a, "rb").read()[156:157] == b"D", "incremental archive does not start with a dumpdir")
    compare_extract(a, "GNU tar incremental (dumpdirs)")
    n += 1
    print("formats: %d archives compared" % n)


def sparse_file(path, size, islands, rnd):
    with open(path, "wb") as f:
        f.truncate(size)
    for off, ln in islands:
        with open(path, "r+b") as f:
            f.seek(off)
            f.write(rnd.randbytes(ln))
    # also through dd seek, as the brief asks for real holes made by tools
    sh(["dd", "if=/dev/urandom", "of=" + path, "bs=4096", "count=1", "seek=%d" % (size // 4096 // 2),
        "conv=notrunc"])


def test_sparse(work, rnd):
    src = os.path.join(work, "sp")
    os.makedirs(src)
    sparse_file(os.path.join(src, "few"), 8 << 20, [(0, 5000), (3 << 20, 100)], rnd)
    sparse_file(os.path.join(src, "many"), 4 << 20, [(i * 65536 + 700, 1000 + i) for i in range(40)], rnd)
    sparse_file(os.path.join(src, "tailhole"), 1 << 20, [(4096, 4096)], rnd)
    with open(os.path.join(src, "allhole"), "wb") as f:
        f.truncate(3 << 20)
    write(os.path.join(src, "dense"), rnd.randbytes(20000))
    os.link(os.path.join(src, "many"), os.path.join(src, "many-link"))
    st = os.stat(os.path.join(src, "many"))
    check(st.st_blocks * 512 < st.st_size // 4, "test file 'many' is not sparse on this filesystem")
    n = 0
    for args, label in ((["--format=pax", "--sparse-version=0.0"], "pax sparse 0.0"),
                        (["--format=pax", "--sparse-version=0.1"], "pax sparse 0.1"),
                        (["--format=pax", "--sparse-version=1.0"], "pax sparse 1.0"),
                        (["--format=gnu"], "old GNU sparse (gnu)"),
                        (["--format=oldgnu"], "old GNU sparse (oldgnu)")):
        a = os.path.join(work, "sparse-%d.tar" % n)
        sh(["tar", "--sparse", "-cf", a, "-C", src] + args + ["."])
        ents, info, _ = compare_extract(a, label)
        for name in (b"few", b"many", b"tailhole"):
            check(ents[name]["flags"] & 1, "%s: %r not marked sparse" % (label, name))
        check(os.path.getsize(a) < (2 << 20), "%s: archive not sparse" % label)
        n += 1
    print("sparse: %d archives compared" % n)


def test_names(work, rnd):
    a = os.path.join(work, "hostile.tar")
    with tarfile.open(a, "w", format=tarfile.GNU_FORMAT) as tf:
        def add(name, data=b"x", **kw):
            ti = tarfile.TarInfo(name)
            ti.size = len(data) if kw.get("type", tarfile.REGTYPE) == tarfile.REGTYPE else 0
            for k, v in kw.items():
                setattr(ti, k, v)
            tf.addfile(ti, io.BytesIO(data) if ti.size else None)
        add("./", type=tarfile.DIRTYPE)  # the archive's own root: ignored, not counted
        add("/", type=tarfile.DIRTYPE)
        add("../x")
        add("/abs/x", b"abs")
        add("a/../../b")
        add("./ok", b"ok")
        add("a//b", b"ab")
        add("x/./y", b"xy")
        add(".")
        add("..")
        add("new\nline", b"nl")
        add("c" * 300 + "/f")
        add("fifo", type=tarfile.FIFOTYPE)
        add("chr", type=tarfile.CHRTYPE, devmajor=1, devminor=3)
        add("blk", type=tarfile.BLKTYPE, devmajor=7, devminor=0)
        add("dangling", type=tarfile.LNKTYPE, linkname="not-there-yet")
        add("p", b"file p")
        add("p/q", b"p is needed as a directory")
        add("p", b"file p again")  # a directory with members wins
        add("t", b"t as a file")
        add("t", type=tarfile.SYMTYPE, linkname="ok")  # later copy wins, type change
        add("h", type=tarfile.LNKTYPE, linkname="./ok")
        for k in ("k1.jpg", "k1.cls", "k2.cls", "k2.jpg", "k2.json", "k3.jpg"):
            add("s/" + k, k.encode())
        add("s/k2.dir", type=tarfile.DIRTYPE)
        add("n" * 255, b"255 is fine")
    ents, info, samples, lst = dump(a)
    want = {b"abs", b"abs/x", b"ok", b"a", b"a/b", b"x", b"x/y", b"new\nline", b"p", b"p/q", b"t", b"h",
            b"s", b"s/k1.jpg", b"s/k1.cls", b"s/k2.cls", b"s/k2.jpg", b"s/k2.json", b"s/k3.jpg",
            b"s/k2.dir", b"n" * 255}
    check(set(ents) == want, "hostile: paths %s, want %s" % (sorted(ents), sorted(want)))
    # ../x a/../../b . .. 300-byte fifo chr blk dangling-hardlink, p-over-dir, and the file p
    # that p/q's path hid
    check(info["skipped"] == 11, "hostile: skipped %d, want 11" % info["skipped"])
    check(info["damage"] == 0, "hostile: damage %d" % info["damage"])
    if b"p" in ents:
        check(ents[b"p"]["type"] == "dir" and ents[b"p"]["flags"] & 4, "p should be an implicit dir")
    if b"t" in ents:
        check(ents[b"t"]["type"] == "symlink" and ents[b"t"]["link"] == b"ok", "t: later symlink should win")
    if b"h" in ents:
        check(ents[b"h"]["canon"] == b"ok" and ents[b"h"]["flags"] & 8 and ents[b"ok"]["nlink"] == 2,
              "h should be a hardlink of ok")
    # Samples in s/: k1 (.cls, .jpg), k2 (.cls), then the directory k2.dir breaks the run, k2 (.jpg .json), k3
    sdir = ents[b"s"]
    groups = [[lst[i]["path"].split(b"/")[-1] for i in range(f, f + n)] for f, n in samples
              if lst[f]["path"].startswith(b"s/")]
    check(groups == [[b"k1.cls", b"k1.jpg"], [b"k2.cls"], [b"k2.jpg", b"k2.json"], [b"k3.jpg"]],
          "samples in s/: %s" % groups)
    check(sdir["nlink"] == 3, "s has one subdirectory: nlink %d" % sdir["nlink"])
    # Top-level entries come first and in byte order.
    top = [e["path"] for e in lst if b"/" not in e["path"]]
    check([e["path"] for e in lst[:len(top)]] == top and top == sorted(top), "top level order %s" % top)
    hardlinks_to_symlinks(work)
    print("names: ok (%d entries, %d skipped)" % (len(lst), info["skipped"]))


def test_leftout(work, rnd):
    """Seeded shards with members left out (a '..' component, a component over 255 bytes, a
    name of any bytes, devices, FIFOs, a hardlink to nothing earlier): the first one left out,
    as the builder says it, is what the index says after a save and a load, byte for byte
    (shardidx_dump's skip_built, skip_loaded; its roundtrip checks the three loads too), and
    it names that member as stored with the reason."""
    reasons = {"dotdot": b"member at offset %d left out: name with a '..' component",
               "long": b"member at offset %d left out: name component longer than 255 bytes",
               "dev": b"device or fifo at offset %d left out",
               "link": b"member at offset %d left out: hardlink to a name not earlier in the "
                       b"archive"}
    nleft = nsaid = 0
    for k in range(40):
        a = os.path.join(work, "left%d.tar" % k)
        bio = io.BytesIO()
        first = None
        nout = 0
        with tarfile.open(fileobj=bio, mode="w", format=rnd.choice(
                [tarfile.GNU_FORMAT, tarfile.PAX_FORMAT]), encoding="utf-8",
                errors="surrogateescape") as tf:
            for j in range(rnd.randint(1, 10)):
                off = bio.tell()
                kind = rnd.choice(["ok", "ok", "dotdot", "long", "dev", "link"])
                raw = bytes(rnd.choice(b"ab\xe9\xff\n ") for _ in range(rnd.randint(1, 5)))
                if kind == "dotdot":
                    name = rnd.choice([b"../" + raw, b"d/../../" + raw, raw + b"/../.."])
                elif kind == "long":
                    name = b"d%d/" % j + b"L" * rnd.randint(256, 420) + raw
                elif kind == "link":
                    name = b"h%d" % j + raw
                else:
                    name = b"m%d_" % j + raw
                ti = tarfile.TarInfo(name.decode("utf-8", "surrogateescape"))
                ti.mtime = 1_700_000_000
                if kind == "dev":
                    ti.type = rnd.choice([tarfile.CHRTYPE, tarfile.BLKTYPE, tarfile.FIFOTYPE])
                elif kind == "link":
                    ti.type = tarfile.LNKTYPE
                    ti.linkname = "later%d" % j
                data = b"x" * rnd.randint(0, 700) if kind in ("ok", "dotdot", "long") else b""
                ti.size = len(data)
                tf.addfile(ti, io.BytesIO(data) if data else None)
                if kind != "ok":
                    nout += 1
                    if first is None:
                        first = (name, kind, off)
        with open(a, "wb") as f:
            f.write(bio.getvalue())
        ents, info, samples, lst = dump(a)
        built, loaded = bytes.fromhex(info["skip_built"]), bytes.fromhex(info["skip_loaded"])
        check(info["skipped"] == nout, "%s: skipped %d, want %d" % (a, info["skipped"], nout))
        check(loaded == built, "%s: loaded %r, built %r" % (a, loaded, built))
        if first is None:
            check(built == b"", "%s: nothing left out, yet %r" % (a, built))
            continue
        nleft += 1
        name, kind, off = first
        said = name[:200] + (b"..." if len(name) > 200 else b"")
        want = b"'" + said + b"': " + reasons[kind] % off
        if check(built == want, "%s: first left out %r, want %r" % (a, built, want)):
            nsaid += 1
    check(nleft >= 20, "only %d of 40 shards left a member out" % nleft)
    print("leftout: ok (%d shards with members left out, each named byte for byte after a "
          "save and a load)" % nsaid)


def hardlinks_to_symlinks(work):
    """A hardlink to a symlink is another symlink with its target's link, mode and mtime, also
    when its own entry is the one that grows the index's table of entries (16, 32, 64): the
    target's fields were read through a pointer into the table after the table moved (a
    use-after-free the ASan build reports; 17 and 33 entries)."""
    bad = []
    for k in range(8, 70):
        a = os.path.join(work, "hl-sym-%d.tar" % k)
        with tarfile.open(a, "w", format=tarfile.GNU_FORMAT) as tf:
            ti = tarfile.TarInfo("l")
            ti.type, ti.linkname, ti.mode, ti.mtime = tarfile.SYMTYPE, "f0", 0o751, 1234567
            tf.addfile(ti)
            for i in range(k):
                ti = tarfile.TarInfo("f%d" % i)
                ti.size = 1
                tf.addfile(ti, io.BytesIO(b"x"))
            ti = tarfile.TarInfo("h")
            ti.type, ti.linkname, ti.mode, ti.mtime = tarfile.LNKTYPE, "l", 0o600, 7654321
            tf.addfile(ti)
        ents, _, _, _ = dump(a)
        h = ents.get(b"h", {})
        got = (h.get("type"), h.get("link"), h.get("mode"), h.get("mtime"))
        if got != ("symlink", b"f0", ents[b"l"].get("mode"), ents[b"l"].get("mtime")):
            bad.append((k, got))
    check(not bad, "hardlinks to a symlink: %r" % bad[:3])


def big_pax(work):
    """A valid pax header over the 16 MiB the parser buffers (a 17 MiB comment record), before
    b.txt, after a.txt: GNU tar reads it; the index keeps a.txt and says why it stops."""
    a = os.path.join(work, "bigpax.tar")
    with tarfile.open(a, "w", format=tarfile.PAX_FORMAT) as tf:
        for name, pax in (("a.txt", {}), ("b.txt", {"comment": "x" * (17 << 20)})):
            ti = tarfile.TarInfo(name)
            ti.size = 5
            ti.pax_headers = pax
            tf.addfile(ti, io.BytesIO(b"hello"))
    listed = subprocess.run(["tar", "-tf", a], stdout=subprocess.PIPE, check=True).stdout.split()
    check(listed == [b"a.txt", b"b.txt"], "GNU tar lists %r" % listed)
    ents, info, _, _ = dump(a)
    check(sorted(ents) == [b"a.txt"] and info["damage"] == EBADMSG and
          info["damage_off"] == 1024 and "over the 16 MiB" in info["message"] and
          "left out" in info["message"],
          "a pax header of 17 MiB: %r, damage %d at %d, %r" % (sorted(ents), info["damage"],
                                                              info["damage_off"], info["message"]))


def hidden_by_path(work):
    """A symlink k and a file g, then k/x and g/child.txt (GNU tar keeps k and g and fails
    to extract the later two); then g2/c.txt and a file g2: the index shows the directories
    k, g and g2 with their members, and counts the hidden k and g and the left-out file g2."""
    a = os.path.join(work, "hidden.tar")
    with tarfile.open(a, "w", format=tarfile.GNU_FORMAT) as tf:
        def add(name, data=None, link=None):
            ti = tarfile.TarInfo(name)
            if link is not None:
                ti.type, ti.linkname = tarfile.SYMTYPE, link
                tf.addfile(ti)
            else:
                ti.size = len(data)
                tf.addfile(ti, io.BytesIO(data))
        add("k", link="tgt")
        add("g", b"file g")
        add("k/x", b"x")
        add("g/child.txt", b"child")
        add("g2/c.txt", b"c")
        add("g2", b"file g2")
    ents, info, _, _ = dump(a)
    kinds = {p: e["type"] for p, e in ents.items()}
    check(kinds == {b"k": "dir", b"k/x": "file", b"g": "dir", b"g/child.txt": "file",
                    b"g2": "dir", b"g2/c.txt": "file"} and info["skipped"] == 3,
          "hidden by a later path: %r, skipped %d (want 3)" % (kinds, info["skipped"]))


def test_damage(work, rnd):
    big_pax(work)
    hidden_by_path(work)
    src = os.path.join(work, "d")
    os.makedirs(src)
    write(os.path.join(src, "a.txt"), rnd.randbytes(700))
    write(os.path.join(src, "L" * 130 + ".bin"), rnd.randbytes(3000))
    write(os.path.join(src, "b.txt"), rnd.randbytes(1500))
    os.symlink("a.txt", os.path.join(src, "ln"))
    write(os.path.join(src, "z" * 40, "c.txt"), rnd.randbytes(5000))
    write(os.path.join(src, "e"), b"")
    for fmt in ("gnu", "pax"):
        a = os.path.join(work, "dmg-%s.tar" % fmt)
        sh(["tar", "--format=" + fmt, "-cf", a, "-C", src, "."])
        orig, oinfo, _, _ = dump(a)
        raw = open(a, "rb").read()
        end_marker = oinfo["end_off"] + 512
        cuts = sorted(set(range(0, len(raw), 512)) | {1, 100, 513, 1000, 2049, 4097, len(raw) - 1} |
                      {rnd.randrange(len(raw)) for _ in range(10)})
        # member boundaries: a stream that ends exactly there is whole (GNU tar,
        # bsdtar and Python's tarfile all read it without complaint)
        with tarfile.open(a) as tf:
            members = tf.getmembers()
        boundaries = {m.offset for m in members}
        boundaries.add(members[-1].offset_data + (-(-members[-1].size // 512) * 512 if members[-1].isreg() else 0))
        t = os.path.join(work, "cut.tar")
        for cut in cuts:
            with open(t, "wb") as f:
                f.write(raw[:cut])
            ents, info, _, _ = dump(t)
            what = "%s cut at %d" % (fmt, cut)
            if cut in boundaries:
                check(info["damage"] == 0, "%s: cut at a member boundary is not damage: %d" % (what, info["damage"]))
            elif cut < end_marker:
                check(info["damage"] == EIO and info["damage_off"] == cut,
                      "%s: damage %d at %d, want -EIO at the cut" % (what, info["damage"], info["damage_off"]))
            else:
                check(info["damage"] == 0, "%s: damage %d" % (what, info["damage"]))
            for p, e in orig.items():
                if e["type"] != "file":  # symlinks and dirs have no data_off
                    continue
                end = e["data_off"] + (e["size"] if e["type"] == "file" else 0)
                got = ents.get(p)
                if end <= cut and e["data_off"] <= cut and got is not None:
                    for k in ("type", "size", "mode", "mtime", "sha256", "link", "data_off"):
                        check(got.get(k) == e.get(k), "%s: %r field %s %r want %r" % (what, p, k, got.get(k), e.get(k)))
                elif got is not None and e["type"] == "file" and e["size"] and end > cut:
                    check(got["flags"] & 2 and got.get("eio") is True,
                          "%s: %r runs past the cut but is not TRUNCATED/-EIO: %r" % (what, p, got))
            # every entry whose data and padding end at or before the cut is there (no slack:
            # a member lost just before the cut is a failure)
            for p, e in orig.items():
                if e["type"] == "file" and e["data_off"] + -(-e["size"] // 512) * 512 <= cut and cut < end_marker:
                    check(p in ents, "%s: %r lost" % (what, p))
        print("damage: %s truncated at %d offsets" % (fmt, len(cuts)))
        # A corrupted header checksum in the middle: the own header (just before its data) of
        # the middle file member.
        offs = sorted(e["data_off"] - 512 for e in orig.values() if e["type"] == "file")
        bad = offs[len(offs) // 2]
        corrupt = bytearray(raw)
        corrupt[bad + 20] ^= 0x41
        with open(t, "wb") as f:
            f.write(corrupt)
        ents, info, _, _ = dump(t)
        hdr_start = bad
        # the member's group may start earlier (L/x headers): damage is at its first header
        check(info["damage"] == EBADMSG and info["damage_off"] == hdr_start,
              "%s checksum: damage %d at %d, want -EBADMSG at %d" % (fmt, info["damage"], info["damage_off"], hdr_start))
        for p, e in orig.items():
            if e["type"] == "file" and e["data_off"] < bad:
                check(p in ents and ents[p].get("sha256") == e["sha256"], "%s checksum: %r before the damage lost" % (fmt, p))
            if e["type"] == "file" and e["data_off"] > bad:
                check(p not in ents, "%s checksum: %r after the damage indexed" % (fmt, p))


def ustar_header(name, size, typ=b"0", mtime=1_000, mode=b"0000644\0", size_field=None, cksum=None):
    """A hand-built ustar header block; size_field / mode: raw field bytes; cksum: a function
    of the sum giving the 8 checksum bytes (default: 6 octal digits, NUL, space)."""
    h = bytearray(512)
    h[0:len(name)] = name
    h[100:108] = mode
    h[108:116] = b"0000000\0"
    h[116:124] = b"0000000\0"
    h[124:136] = size_field if size_field is not None else b"%011o\0" % size
    h[136:148] = b"%011o\0" % mtime
    h[156:157] = typ
    h[257:263] = b"ustar\0"
    h[263:265] = b"00"
    h[148:156] = b" " * 8
    h[148:156] = (cksum or (lambda s: b"%06o\0 " % s))(sum(h))
    assert len(h) == 512
    return bytes(h)


def pad512(b):
    return b + b"\0" * (-len(b) % 512)


def pax_rec(key, val):
    body = b" " + key + b"=" + val + b"\n"
    n = len(body) + 1
    while len(b"%d" % n) + len(body) != n:
        n += 1
    return b"%d" % n + body


def pax_hdr(records):
    x = b"".join(pax_rec(k, v) for k, v in records)
    return ustar_header(b"PaxHeaders/x", len(x), b"x") + pad512(x)


def member(name, data, **kw):
    return ustar_header(name, len(data), **kw) + pad512(data)


OK_TAIL = member(b"ok.txt", b"ok\n") + b"\0" * 1024


def test_compat(work, rnd):
    """Archives the tar tools read that shardfs read differently (issue 23): each indexed
    whole and compared with GNU tar's extraction; plus what GNU tar refuses, still refused."""
    def arch(name, data):
        a = os.path.join(work, name)
        with open(a, "wb") as f:
            f.write(data)
        return a

    # 1. An old-style directory: typeflag '0', name ending in '/', with data blocks (GNU tar
    #    takes it as a directory and skips its data; -x resyncs with an error, -t reads it whole).
    a = os.path.join(work, "olddir.tar")
    with tarfile.open(a, "w", format=tarfile.USTAR_FORMAT) as tf:
        ti = tarfile.TarInfo("d/")
        ti.size = 40
        ti.mode = 0o750
        ti.mtime = 1_600_000_000
        tf.addfile(ti, io.BytesIO(b"x" * 40))
        ti = tarfile.TarInfo("ok.txt")
        ti.size = 3
        tf.addfile(ti, io.BytesIO(b"ok\n"))
    check(sh(["tar", "-tf", a]).stdout == b"d/\nok.txt\n", "GNU tar -t does not read olddir.tar whole")
    ents, _, _ = compare_extract(a, "old-style directory with data blocks", tar_ok=(0, 2))
    check(ents.get(b"d", {}).get("type") == "dir" and ents[b"d"]["mode"] == 0o750, "d/ is not a 0750 directory")
    check(ents.get(b"ok.txt", {}).get("size") == 3, "ok.txt after the old-style directory lost")

    # 2. Unknown type flags are regular files (GNU tar: "Unknown file type 'Z', extracted as
    #    normal file"); 'M' (continued from another volume) is left out, as GNU tar does.
    data = b"".join(member(b"t" + c, b"vendor type " + c + b"\n", typ=c) for c in (b"Z", b"A", b"Q", b"N"))
    a = arch("unknown-types.tar", data + OK_TAIL)
    ents, info, _ = compare_extract(a, "unknown type flags", tar_ok=(0, 2))
    for c in (b"Z", b"A", b"Q", b"N"):
        e = ents.get(b"t" + c, {})
        check(e.get("type") == "file" and e.get("size") == 14, "type %r not a regular file: %r" % (c, e))
    check(info["skipped"] == 0, "unknown types: skipped %d" % info["skipped"])
    a = arch("multivol.tar", member(b"cont", b"rest of a file", typ=b"M") + OK_TAIL)
    ents, info, _, _ = dump(a)
    check(set(ents) == {b"ok.txt"} and info["skipped"] == 1 and info["damage"] == 0,
          "'M' member: %s skipped %d damage %d" % (sorted(ents), info["skipped"], info["damage"]))

    # 3. Several pax 'x' headers before one member: only the last applies.
    ten = b"0123456789"
    a = arch("pax-multi.tar", pax_hdr([(b"size", b"5"), (b"mtime", b"77")]) +
             pax_hdr([(b"path", b"renamed.txt")]) + member(b"f.txt", ten) + OK_TAIL)
    ents, _, _ = compare_extract(a, "two pax headers before one member")
    e = ents.get(b"renamed.txt", {})
    check(e.get("size") == 10 and e.get("mtime") == 1000, "renamed.txt: %r, want 10 bytes, mtime 1000" % e)
    go = "/usr/share/go-1.19/src/archive/tar/testdata/pax-multi-hdrs.tar"
    if os.path.exists(go):
        ents, info, _, _ = dump(go)
        check(set(ents) == {b"bar"} and ents[b"bar"]["type"] == "symlink" and
              ents[b"bar"]["link"] == b"PAX4/PAX4/long-linkpath-name",
              "Go's pax-multi-hdrs.tar: %r" % sorted(ents))
    else:
        print("Go's pax-multi-hdrs.tar not installed (golang-1.19-src): hand-built case only")

    # 4. Malformed values GNU tar reads past: a pax mtime with stray bytes (GNU tar takes the
    #    leading number), a pax mtime with no digits (ignored: the header's mtime), a checksum
    #    field with one leading NUL, a mode field that starts with NULs (GNU tar: 0).
    a = arch("pax-bad-mtime.tar", pax_hdr([(b"mtime", b"999xxx9324.432432444444")]) + member(b"f.txt", ten) + OK_TAIL)
    ents, _, _ = compare_extract(a, "pax mtime=999xxx")
    check(ents.get(b"f.txt", {}).get("mtime") == 999, "mtime=999xxx: %r" % ents.get(b"f.txt"))
    a = arch("pax-nodigit-mtime.tar", pax_hdr([(b"mtime", b"xxx")]) + member(b"f.txt", ten, mtime=4242) + OK_TAIL)
    ents, _, _ = compare_extract(a, "pax mtime=xxx", tar_ok=(0, 2))
    check(ents.get(b"f.txt", {}).get("mtime") == 4242, "mtime=xxx: %r" % ents.get(b"f.txt"))
    a = arch("cksum-nul.tar", member(b"f.txt", ten, cksum=lambda s: b"\0%06o " % s) + OK_TAIL)
    compare_extract(a, "checksum field with a leading NUL")
    a = arch("mode-nul.tar", member(b"f.txt", ten, mode=b"\0" * 4 + b"644\0") + OK_TAIL)
    ents, _, _ = compare_extract(a, "mode field with leading NULs")
    check(ents.get(b"f.txt", {}).get("mode") == 0, "mode with leading NULs: %r" % ents.get(b"f.txt"))
    go = "/usr/share/go-1.19/src/archive/tar/testdata/pax-bad-mtime-file.tar"
    if os.path.exists(go):
        compare_extract(go, "Go's pax-bad-mtime-file.tar")

    # What GNU tar refuses stays refused: a malformed pax size, a size field whose digits
    # come after NULs (GNU tar reads 0 and then finds data where a header should be).
    for name, data in (("pax-bad-size.tar", pax_hdr([(b"size", b"12x")]) + member(b"f.txt", ten)),
                       # a NUL in a pax keyword: GNU tar "missing equal sign" (Go's pax-nul-xattrs.tar)
                       ("pax-nul-key.tar", pax_hdr([(b"SCHILY.xattr.nu\0ll", b"fizz")]) + member(b"f.txt", ten)),
                       ("size-nul.tar", ustar_header(b"f.txt", 0, size_field=b"\0" * 8 + b"012\0") + pad512(ten))):
        a = arch(name, data + OK_TAIL)
        r = sh(["tar", "-tf", a], ok=(0, 2))
        check(r.returncode == 2, "%s: GNU tar no longer refuses it" % name)
        ents, info, _, _ = dump(a)
        # damage recorded, and no member shows the 10 bytes (a guess); ok.txt is after the damage
        check(info["damage"] == EBADMSG and b"ok.txt" not in ents and
              not any(e["type"] == "file" and e["size"] for e in ents.values()),
              "%s: damage %d, entries %r: want refused" % (name, info["damage"], sorted(ents)))
    print("compat: ok")


def fuzz_inputs(work, rnd):
    src = os.path.join(work, "fz")
    os.makedirs(src)
    make_tree(src, rnd)
    sparse_file(os.path.join(src, "t", "sp"), 1 << 20, [(i * 30000, 600) for i in range(30)], rnd)
    files = []
    for i, args in enumerate((["--format=gnu"], ["--format=pax"], ["--format=ustar"], ["--format=v7"],
                              ["--format=pax", "--sparse", "--sparse-version=1.0"],
                              ["--format=pax", "--sparse", "--sparse-version=0.1"],
                              ["--format=gnu", "--sparse"])):
        a = os.path.join(work, "fz%d.tar" % i)
        sh(["tar", "-cf", a, "-C", src, "t"] + args, ok=(0, 2))
        files.append(a)
    a = os.path.join(work, "fzpy.tar")
    tarfile_extras(a, tarfile.PAX_FORMAT)
    files.append(a)
    return files


def test_fuzz(work, rnd):
    files = fuzz_inputs(work, rnd)
    seed = rnd.randrange(2**63)
    print("fuzz: shardidx_dump --fuzz %d 6000 ..." % seed, flush=True)
    p = subprocess.run([DUMP, "--fuzz", str(seed), "6000"] + files, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    sys.stdout.write(p.stdout.decode(errors="replace"))
    check(p.returncode == 0, "fuzz seed %d exited %d: %s" % (seed, p.returncode, p.stderr.decode(errors="replace")[-3000:]))


# Where flips must land, per index version, over idxfuzz's inputs: every section of the
# file (shardidx_dump's section_name), so a damaged index is known to be refused at load
# whichever part of it is hit.
IDX_SECTIONS = {
    4: {"header", "section table", "ident", "heads", "blocks", "dirs", "strs", "sparse", "segs",
        "links", "skip"},
    2: {"header", "section table", "ident", "recs", "names", "sparse", "segs", "links"},
}


def test_idxfuzz(work, rnd):
    files = fuzz_inputs(work, rnd)
    flipped = {4: set(), 2: set()}
    # and a shard with members left out: its first one is the skip section
    hostile = os.path.join(work, "fzleft.tar")
    with tarfile.open(hostile, "w", format=tarfile.GNU_FORMAT) as tf:
        for name, typ in (("ok.txt", tarfile.REGTYPE), ("../up.txt", tarfile.REGTYPE),
                          ("dev/c", tarfile.CHRTYPE), ("b.txt", tarfile.REGTYPE)):
            ti = tarfile.TarInfo(name)
            ti.type = typ
            ti.size = 5 if typ == tarfile.REGTYPE else 0
            tf.addfile(ti, io.BytesIO(b"hello") if ti.size else None)
    for f in (files[0], files[4], files[7], hostile):
        seed = rnd.randrange(2**63)
        p = subprocess.run([DUMP, "--idxfuzz", str(seed), f], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        out = p.stdout.decode(errors="replace")
        sys.stdout.write(out)
        check(p.returncode == 0, "idxfuzz %s seed %d exited %d: %s" % (
            os.path.basename(f), seed, p.returncode, p.stderr.decode(errors="replace")[-3000:]))
        # "idxfuzz ok: version V, N bytes, F flips rejected (header 96, blocks 975, ...)"
        for m in re.finditer(r"idxfuzz ok: version (\d+), .* flips rejected \(([^)]*)\)", out):
            for part in m.group(2).split(", "):
                name, n = part.rsplit(" ", 1)
                if int(n) > 0:
                    flipped[int(m.group(1))].add(name)
    for v, want in IDX_SECTIONS.items():
        check(want <= flipped[v], "idxfuzz: version %d sections never flipped: %s" % (
            v, ", ".join(sorted(want - flipped[v]))))
    print("idxfuzz: flips rejected in every section: %s" % "; ".join(
        "version %d: %s" % (v, ", ".join(sorted(flipped[v]))) for v in (4, 2)))


TESTS = {"formats": test_formats, "sparse": test_sparse, "names": test_names, "damage": test_damage,
         "compat": test_compat, "fuzz": test_fuzz, "idxfuzz": test_idxfuzz,
         "leftout": test_leftout}


def main():
    global DUMP
    ap = argparse.ArgumentParser()
    ap.add_argument("--dump", required=True)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("test", choices=list(TESTS) + ["all"])
    a = ap.parse_args()
    DUMP = os.path.abspath(a.dump)
    # fixed in CI (a run is replayable); --seed or SHARDIDX_SEED gives another
    seed = a.seed if a.seed is not None else int(os.environ.get("SHARDIDX_SEED", 20240611))
    print("seed %d (rerun with --seed %d or SHARDIDX_SEED=%d)" % (seed, seed, seed), flush=True)
    names = list(TESTS) if a.test == "all" else [a.test]
    for name in names:
        rnd = random.Random(seed)
        with tempfile.TemporaryDirectory(prefix="shardidx-%s-" % name) as work:
            try:
                TESTS[name](work, rnd)
            except Exception as ex:  # a crash of shardidx_dump or a tool
                fail("%s: %s" % (name, ex))
    if FAILS:
        print("%d of %d check(s) failed" % (len(FAILS), CHECKS[0]))
        return 1
    if CHECKS[0] == 0:
        print("FAIL: the test made no check")
        return 1
    print("all ok: %d checks" % CHECKS[0])
    return 0


if __name__ == "__main__":
    sys.exit(main())
