/*
 * fs_opt.c — command lines as data: each subcommand is a list of option tables (struct fs_opt)
 * with each option's type, the field it fills (offsetof into the command's config struct), its
 * default, its accepted range and its help text. Defaults are applied by parsing each table's
 * default string exactly like a command-line value, before argv, and --help prints the same
 * strings: what the help says is what runs. No other code applies a default to these fields
 * (backend/ and cachetier/ take what they are given; they only clamp, as their headers say). The
 * store's and the cache tier's options fill struct backend_config and struct cachetier_config
 * inside struct fs_config (CFG(be.FIELD), CFG(ct.FIELD)), which are handed to backend_open and
 * cachetier_open as they are: nothing copies them field by field.
 *
 * Values are strict: integers and sizes are digits only (sizes with one optional K, M, G or T
 * suffix, powers of 1024), within the option's range, without overflow; a value that is not
 * accepted is an error naming the option, never a silent wrap-around.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "fs_i.h"

#define CFG(field) offsetof(struct fs_config, field)
#define NOLIMIT	   UINT64_MAX

/* What the mount itself does: FUSE, the kernel's caches, the view. */
static const struct fs_opt mount_opts[] = {
    {"foreground", 'f', FS_OPT_FLAG, CFG(foreground), 0, NULL, 0, 0, NULL,
     "stay in the foreground and log to stderr"},
    {"debug", 'd', FS_OPT_FLAG, CFG(debug), 0, NULL, 0, 0, NULL,
     "log every FUSE request (implies -f)"},
    {"log-file", 0, FS_OPT_STR, CFG(log_file), 0, NULL, 0, 0, "FILE",
     "log file in the background (default: 'log' in the source's cache directory)"},
    /* FUSE threads block on disk reads and decoding; 16 keeps 2 cores
     * busy while some wait */
    {"threads", 0, FS_OPT_UINT, CFG(max_threads), 0, "16", 1, 1024, "N",
     "most FUSE worker threads"},
    /* the kernel reads ahead at most its bdi's read_ahead_kb (128K unless
     * raised): a read of a larger file is split into READ requests of
     * that size, a FUSE round trip each. At most 256K: a sequential
     * reader's READs grow to twice the window, and one near 1 MiB no
     * longer fits the splice pipe (pipe-max-size): libfuse then copies it
     * twice (a cat's FUSE CPU tripled at 512K) */
    {"kernel-readahead", 0, FS_OPT_SIZE, CFG(kernel_ra_bytes), 0, "256K", 0, 256u << 10, "SIZE",
     "the kernel's readahead on the mount (its read_ahead_kb; set by a daemon run as root): a "
     "read of a file of up to SIZE is one READ request (the kernel's default, 128K, splits a "
     "1 MB file into 8; 256K into 4); at most 256K; 0: the kernel's"},
    /* an object never changes for one ETag: names and attributes can be
     * cached by the kernel for a day */
    {"timeout", 0, FS_OPT_SECONDS, CFG(entry_timeout_s), 0, "86400", 0, 0, "SECONDS",
     "kernel cache time of names and attributes (data is immutable)"},
    {"layout", 0, FS_OPT_ENUM, CFG(layout), 0, "shards", 0, 0, "shards|imagefolder",
     "what the mount shows: shards and their members, or <class>/<image>"},
    /* who owns what the mount shows; with allow_other (and so
     * default_permissions) the owner bits of the modes apply to them, and
     * they may send commands (stats, prefetch, refresh, plan) */
    {"uid", 0, FS_OPT_UINT, CFG(uid), 1 + CFG(uid_given), NULL, 0, 4294967294u, "N",
     "the owner (numeric uid) of every file and directory shown (default: who mounts)"},
    {"gid", 0, FS_OPT_UINT, CFG(gid), 1 + CFG(gid_given), NULL, 0, 4294967294u, "N",
     "the group (numeric gid) of every file and directory shown (default: who mounts)"},
    {"class-from", 0, FS_OPT_ENUM, CFG(class_from), 0, "cls", 0, 0, "cls|dir|key-prefix",
     "imagefolder class: the .cls integer, the member's directory, the key up to '_'"},
    /* a gap shifts torchvision's labels (class_to_idx numbers the
     * directories in order): refused unless asked for */
    {"class-gaps", 0, FS_OPT_ENUM, CFG(class_gaps), 0, "refuse", 0, 0, "refuse|empty",
     "--class-from cls with .cls values missing below the largest: refuse the mount, or show "
     "an empty class directory for each missing value (labels stay the .cls integers)"},
    /* the build's sorts take half each (two at a time), 70-80 bytes a
     * sample: 64M sorts about 400,000 samples in memory (and a view that
     * cannot be saved then fits the heap); a larger dataset's build
     * writes sorted runs to the cache directory and merges them, so its
     * heap stays near this whatever the number of samples (2.15 M
     * samples: a peak RssAnon of 66 MB against 687 MB unbounded) */
    {"imagefolder-build-memory", 0, FS_OPT_SIZE, CFG(if_build_memory), 0, "64M", 4096, NOLIMIT,
     "SIZE",
     "heap for building the imagefolder view; a larger dataset is sorted in runs through "
     "temporary files in the cache directory"},
    /* one shard being read and two on the way hide a shard fill's latency
     * from a reader that reads shards in order */
    {"prefetch-shards", 0, FS_OPT_UINT, CFG(prefetch_shards), 0, "2", 0, 1024, "N",
     "shards fetched ahead of a reader that reads shards in order (0: off)"},
    /* the user's ceiling: below it the fetcher sizes the lookahead by the
     * link and the cache (fetch/fetch_plan.c fetch_plan_lookahead). 256M is
     * above what 32 connections of 60 MB/s and 30 ms to first byte need
     * for 100 KB samples (4 x 32 x 1.9 MB = 243 MB), so by default the
     * link and the cache decide */
    {"plan-lookahead", 0, FS_OPT_SIZE, CFG(plan_lookahead_bytes), 0, "256M", 0, NOLIMIT, "SIZE",
     "most bytes of planned paths (.shardfs/control 'plan', shardfs plan) fetched ahead of "
     "their readers, split over the plans; below it: what the link needs in flight, within "
     "half of --cache-size after what readers pin and the plans hold (0: no fetching ahead)"},
    /* planned extents of one object closer than a connection moves in
     * one time to first byte go out as one request (the bytes between
     * cost less than another request); the mount measures both from its
     * own fills (fetch_link_get) and uses this only before the first
     * measurement: small enough that a wrong guess costs little (on a
     * link of 30 ms and 60 MB/s the measured gap is about 1.8 MB) */
    {"plan-gap", 0, FS_OPT_SIZE, CFG(plan_gap_bytes), 0, "256K", 0, 1ull << 30, "SIZE",
     "planned paths of one object closer than this are fetched in one request with the bytes "
     "between them until the mount has measured its link (then: the rate of a connection x "
     "its time to first byte, at most --chunk-size); 0: one request per planned path"},
    /* planned bytes the cache could keep only by evicting are fetched into
     * this much memory and served from there (fetch/fetch_stage.c): not
     * written to the cache, checksummed, evicted and punched; it also
     * bounds a plan's lookahead in place of the cache */
    {"plan-memory", 0, FS_OPT_SIZE, CFG(plan_memory_bytes), 0, "64M", 0, 1ull << 34, "SIZE",
     "memory for planned bytes the cache could keep only by evicting: fetched into it and read "
     "from there, never written to the cache; it bounds how far ahead plans fetch (0: such "
     "bytes go through the cache)"},
    /* AIStore answers a window of planned ranges, of many objects, in one
     * GetBatch request (a TAR stream) where other stores need a ranged GET
     * per range; off by default: the planned epoch with it took longer than
     * with ranged GETs in every L9 round measured (tests/bench/README.md,
     * L9: its reads wait for a version HEAD after their items arrive) */
    {"get-batch", 0, FS_OPT_ENUM, CFG(get_batch), 0, "off", 0, 0, "off|auto",
     "ais:// sources: off: ranged GETs as for other stores; auto: fetch each window of a "
     "reading plan with AIStore's GetBatch (ranged GETs when the store refuses it)"},
    /* a dataset that fits in the cache is worth fetching at once, at the
     * link's full rate, instead of at the pace of the first epoch's
     * reads; 90 % leaves room for readers and other datasets */
    {"warm", 0, FS_OPT_ENUM, CFG(warm), 0, "auto", 0, 0, "off|auto|all",
     "fill the cache with the whole remote dataset in the background: auto when it fits in "
     "90% of the cache size and in the disk's room; all: what fits (it never evicts)"},
    /* a find or os.walk over millions of files reads names and types
     * only: an entry with attributes costs the kernel an inode and a
     * dentry (about 1 KB and 2-3 us each) whether or not it is used;
     * ImageFolder opens every file it listed, and a LOOKUP per file costs
     * a FUSE round trip each (fs_ops.c, dir_lists_attrs) */
    {"listing-attrs", 0, FS_OPT_ENUM, CFG(listing_attrs), 0, "auto", 0, 0, "auto|all|looked",
     "which listed entries carry attributes: looked: directories, and the files of directories "
     "in which a file was looked up (a walk that only lists creates no kernel inode per file); "
     "auto: looked, and with --layout imagefolder every entry (ImageFolder opens every file it "
     "lists: no LOOKUP per file); all: every entry (opening what was listed sends no lookup)"},
    {"strict-open", 0, FS_OPT_FLAG, CFG(strict_open), 0, NULL, 0, 0, NULL,
     "answer every open, at the cost of a round trip per open (default: opens cost nothing; "
     "the mount is read-only either way)"},
    /* off by default: `ls -l` asks two xattrs of every file (security.selinux,
     * the ACL), a round trip each unless getxattr answers ENOSYS, which the
     * kernel remembers; .shardfs/samples.tsv says where samples live */
    {"xattr", 0, FS_OPT_FLAG, CFG(xattr), 0, NULL, 0, 0, NULL,
     "extended attributes user.shardfs.shard, .offset, .size, .key on members (default: off; "
     "getxattr answers ENOSYS, so `ls -l` costs one round trip per file instead of three)"},
    {"no-xattr", 0, FS_OPT_FLAG, CFG(no_xattr), 0, NULL, 0, 0, NULL,
     "no extended attributes: what the default does now (kept for existing command lines; "
     "wins over --xattr)"},
    {"option", 'o', FS_OPT_APPEND, CFG(fuse_opts), 0, NULL, 0, 0, "OPT[,OPT...]",
     "FUSE mount options, e.g. allow_other (then default_permissions applies); nonempty "
     "mounts over a non-empty directory; ro,nosuid,nodev always apply (suid and dev are "
     "refused)"},
    {NULL, 0, 0, 0, 0, NULL, 0, 0, NULL, NULL},
};

/* The cache directory (mount and index). */
static const struct fs_opt cache_opts[] = {
    {"cache-dir", 0, FS_OPT_STR, CFG(ct.cache_dir), 0, NULL, 0, 0, "DIR",
     "cache directory, created 0700 (default: $XDG_CACHE_HOME/shardfs, else "
     "$HOME/.cache/shardfs, else /var/cache/shardfs)"},
    /* a few hundred shards of a typical dataset, a fraction of a training
     * node's NVMe */
    {"cache-size", 0, FS_OPT_SIZE, CFG(ct.cache_size_bytes), 0, "20G", 1, NOLIMIT, "SIZE",
     "most bytes of remote data kept in the whole cache directory (every source); mounts "
     "sharing it each evict, as they fill, down to their own SIZE: give them the same; at "
     "most what its filesystem holds above --min-free (a larger SIZE is lowered at mount)"},
    /* the cache must not be what fills the disk */
    {"min-free", 0, FS_OPT_SIZE, CFG(ct.min_free_bytes), 0, "1G", 0, NOLIMIT, "SIZE",
     "free space the cache leaves on its filesystem: the smaller of SIZE and "
     "--min-free-percent of the filesystem"},
    /* 1 GiB is nothing on a training node's NVMe but all of a small
     * tmpfs or container disk: 5 % of the filesystem caps it there */
    {"min-free-percent", 0, FS_OPT_UINT, CFG(ct.min_free_percent), 0, "5", 1, 100, "N",
     "see --min-free"},
    /* Real shards decode at 1-1.1x (jpg), 5-10x (text, npy), and up to
     * 100-140x for shards of only tiny members (540x at zstd -19); gzip
     * bombs reach ~1030x, zstd bombs ~30,000x: 500 stops both with a 2x
     * margin over the densest genuine shard measured. Checked past the
     * first 64 MiB only (small tars are mostly headers and padding). */
    {"max-decode-ratio", 0, FS_OPT_UINT, CFG(ct.max_decode_ratio), 0, "500", 1, 1u << 30, "N",
     "refuse a compressed shard (EFBIG) that decodes, past its first 64M, to more than N "
     "times the compressed bytes read: a decompression bomb"},
    /* far above any real shard (WebDataset shards are 100 MB to a few
     * GB), far below a disk */
    {"max-decoded-size", 0, FS_OPT_SIZE, CFG(ct.max_decoded_bytes), 0, "64G", 1, NOLIMIT, "SIZE",
     "refuse a compressed shard (EFBIG) that decodes to more than SIZE"},
    /* one chunk in flight on every default connection ahead of one
     * sequential reader (32 x 8M): on a link of 60 MB/s per connection
     * and 30 ms to first byte, a window of 64M left three quarters of
     * the connections idle under a cat of one shard. The fetch
     * scheduler's rules cap it at an eighth of --cache-size (readahead that outruns the cache
     * evicts what it fetched before the reader gets there) and raises it
     * to one chunk */
    {"readahead", 0, FS_OPT_SIZE, CFG(ct.readahead_max_bytes), 1 + CFG(readahead_given), "256M", 1,
     NOLIMIT, "SIZE",
     "largest readahead window of a sequential reader (at most 1/8 of --cache-size, at least "
     "one chunk; the log says when it is capped)"},
    /* large enough that a range GET runs at the store's streaming rate,
     * small enough that a random member read fetches little; at most
     * 1 GiB (a failed fill is fetched again whole); the cache tier rounds
     * it up to whole 4 KiB blocks. The rule when it is not given
     * (CHUNK_PER_CACHE, check_common): at most an eighth of --cache-size,
     * a power of two, at least 64K. A cache of fewer chunks evicts what a
     * reader is about to read: a shuffled epoch over --cache-size 4M with
     * 8M chunks fetched 38 times the bytes it read, with 1M 3.4 times */
    {"chunk-size", 0, FS_OPT_SIZE32, CFG(ct.chunk_bytes), 1 + CFG(chunk_size_given), "8M", 4096,
     1ull << 30, "SIZE",
     "unit of cache fills, one range request each (not given: at most 1/8 of --cache-size, "
     "a power of 2, at least 64K)"},
    /* an ETag that is weak or made of the mtime and size (nginx) stays
     * the same through a same-size rewrite with the mtime put back: by
     * default units of two versions are kept apart by fetching one cached
     * unit again per fill and comparing it (docs/faults.md "Validators");
     * trust saves that request where the source is never rewritten so */
    {"weak-etag", 0, FS_OPT_ENUM, CFG(ct.weak_etag_trust), 0, "check", 0, 0, "check|trust",
     "objects whose ETag is weak or made of the mtime and size (nginx): check: a cached unit "
     "is fetched again and compared before units filled since are served (one request per "
     "fill; a change gives ESTALE, then the new version); trust: not compared (a same-size "
     "rewrite that keeps the mtime can then mix two versions); an object whose ETag is new "
     "at every answer: check: EPROTO, trust: its size and mtime are its version"},
    /* a prefetch's bytes are read later if at all: through the page cache
     * they cost a copy, their dirty writeback and, at eviction, the punch's
     * folio work, which O_DIRECT saves (cachetier/README.md, "Direct
     * fills"). prefetch saves CPU: on the bench's VM the fill writer's copy
     * into fresh page cache pages was 46-48 % of a buffered prefetch's CPU,
     * and `shardfs prefetch` (L4) cost the daemon 0.95-1.71 CPU-s per GB
     * buffered against 0.80-1.03 direct; but off by default: written one
     * at a time, at load 9 the prefetch took 1.82 s against 1.10 (L1 282
     * against 466 MB/s; tests/bench/README.md, "L4: fresh page cache"; on
     * an earlier VM direct was no cheaper: "L4: direct fills"); with
     * several in flight (2 direct writers) it took 1.16 s against 1.08 at
     * load 9-11, but cost 1.06 CPU-s/GB against buffered's 0.87 there
     * (6 rounds: cachetier/README.md, "Direct fills"): a quiet bench
     * decides. auto
     * also writes the warm's, a reader's shards ahead and a plan's
     * lookahead direct, which are read soon */
    {"direct-fills", 0, FS_OPT_ENUM, CFG(ct.direct_fills), 0, "off", 0, 0, "off|auto|prefetch",
     "prefetch: the fills of `shardfs prefetch`, which no reader waits on, are written with "
     "O_DIRECT, bypassing the page cache (buffered where the cache's file system refuses it, "
     "as tmpfs); auto: also the warm's, a reader's shards ahead and a plan's lookahead; off: "
     "every fill through the page cache"},
    /* the kernel's own writeback takes dirty pages after 30 s
     * (vm.dirty_expire_centisecs), so a unit that old costs the sync little;
     * a unit evicted younger (a planned epoch with a cache a quarter of the
     * data keeps its units seconds) is never named in a map, nor synced
     * unless an older unit of its object is: a crash costs at most 30 s of
     * fills, fetched again */
    {"durable-delay", 0, FS_OPT_SECONDS, CFG(ct.durable_delay_s), 0, "30", 0, 0, "SECONDS",
     "a filled unit is made durable and recorded in its map once it is this old; a crash "
     "or kill loses at most the fills of this long (fetched again, never served wrong); "
     "units evicted sooner are never recorded (0: about every second)"},
    {NULL, 0, 0, 0, 0, NULL, 0, 0, NULL, NULL},
};

/* The remote store (mount and index). */
static const struct fs_opt store_opts[] = {
    {"endpoint", 0, FS_OPT_STR, CFG(be.endpoint), 0, NULL, 0, 0, "URL",
     "remote store endpoint (default: AWS_ENDPOINT_URL, AIS_ENDPOINT, or the store's own)"},
    {"no-sign", 0, FS_OPT_FLAG, CFG(be.no_sign), 0, NULL, 0, 0, NULL,
     "anonymous requests to S3/GCS (public buckets)"},
    /* An object store's connection runs at 60-90 MB/s and each range GET
     * waits ~30 ms for its first byte, so an 8 MiB chunk keeps a
     * connection busy 76-82 % of the time: filling a 10 Gbit/s link
     * (1250 MB/s) takes 1250 / (60 x 0.82) = 26 connections at 60 MB/s,
     * 19 at 90. Peers size theirs alike (mountpoint-s3: 16 threads of
     * 8 MiB parts; gcsfuse: max(16, 2 x CPUs) parallel downloads).
     * Measured with tests/bench/link_bench.py's emulator (30 ms to first
     * byte): a 1 GB prefetch at 8 MB/s per connection reached 0.96, 0.92,
     * 0.89 and 0.82 of connections x rate with 8, 16, 32 and 64 (the
     * 30 ms per chunk and the last round of chunks allow 0.93-0.97); at
     * 60 MB/s per connection, 32 connections filled 0.5-0.8 GB/s, as much
     * as this 2-core VM's CPU allows. The mount runs one more fill thread
     * than connections (one may wait for room or for another process's
     * fill while every connection fetches). Fills hold no chunk buffers:
     * the bytes go from curl's 64 KiB receive buffer of each connection
     * straight into the cache file (2 MiB with the defaults). */
    {"connections", 0, FS_OPT_UINT, CFG(be.connections), 0, "32", 1, 1024, "N",
     "most parallel connections to a remote store"},
    /* A planned sample is one ranged GET of 100-200 KB: 30 ms waiting for
     * its first byte, 2-3 ms of transfer at 60 MB/s, so --connections of
     * them in flight leave the link mostly idle. Requests of planned
     * ranges of at most 1 MiB (FETCH_SMALL_FILL_BYTES) may run past
     * --connections up to this many in all (object stores serve thousands
     * of requests a second per prefix); demand, readahead and whole-object
     * prefetch fills keep --connections (the last within
     * --prefetch-connections). Measured with
     * tests/bench/link_bench.py --only plan --quick --plan-loaders bytes
     * (512 MB, 30 ms, 60 MB/s per connection; one run each on the 2-core
     * machine shared with other builds, load 3.7-5): reads of the planned
     * cold epoch that waited for a fill, with 32 / 64 / 128 / 256: 219,
     * 88, 74-92, 52; the epoch 7.2, 5.7, 5.2-8.7, 6.1 s (the machine's
     * noise is larger than the differences; the epoch is bound by the
     * CPU of loader, daemon and emulator there). 256 since 2026-12-01: the
     * planned cold epoch's ~3,900 requests (0.77 a sample) hold a
     * connection a time to first byte each, so at 128 they need at least
     * 3,900 x 30 ms / 128 = 0.92 s, about the whole epoch on a quiet
     * machine (1.1-1.3 s); a trace of one such epoch found 128 transfers
     * running at 92 of its 93 reads that waited for a staged span, each
     * span's first byte 40-120 ms after it was handed over
     * (tests/bench/README.md, "The stage": "Where the readers waited") */
    {"max-connections", 0, FS_OPT_UINT, CFG(be.max_connections), 1 + CFG(max_connections_given),
     "256", 1, 4096, "N",
     "most parallel connections while small planned ranges are fetched (at least "
     "--connections: a smaller value is refused; not given, it is raised to --connections)"},
    /* A whole-object prefetch (shardfs prefetch, --warm, --prefetch-shards)
     * on the bench's link (60 MB/s a connection, 30 ms to first byte, 8
     * shards of 64 MB, 8 MiB requests) is bound by this 2-core VM's CPU,
     * not by the link, at 16 connections as at 32: the same or less wall
     * time, and the daemon's CPU-s per GB filled lower at 16 in four A/Bs
     * (-10 %, -4 %, -17 % by --connections, -13 % by this option, at the
     * median; the I/O loop's share most: 17 fills' buffers and sockets in
     * flight against 33, half the pauses; tests/bench/README.md, "L4: the
     * count side"). 16 at 60 MB/s is 0.96 GB/s, twice what curl moved of 8
     * shards at once there. Cursors only: readers' fills and planned ranges
     * keep --connections. But that was at load 17-25, the prefetch
     * CPU-starved at either count: on a quiet machine (load 0.3-1.2, the
     * same link) 16 moved 645 MB/s against 1036 at 32 for no less CPU per
     * GB (0.877 against 0.848, 2 rounds a side): 16 connections with 30 ms
     * before each 8 MiB answer are the bound there. So the default is 32,
     * as --connections: the cursors as before the option; a count that
     * follows the measured fill rate would take both. */
    {"prefetch-connections", 0, FS_OPT_UINT, CFG(ct.cursor_fills),
     1 + CFG(prefetch_connections_given), "32", 1, 1024, "N",
     "most whole-object prefetch fills (shardfs prefetch, --warm, --prefetch-shards) in "
     "flight at once (at most --connections: a larger value is refused; not given, it is "
     "lowered to --connections; readers' fills and planned ranges are not bound by it)"},
    {"ca-file", 0, FS_OPT_STR, CFG(be.ca_file), 0, NULL, 0, 0, "FILE",
     "CA bundle that verifies the store's TLS certificate (default: the system's)"},
    /* long enough to ride out a store's restart or a short network
     * outage, short enough that a reader gets EIO rather than a hang */
    {"retry-budget", 0, FS_OPT_SECONDS, CFG(be.retry_budget_s), 0, "30", 0, 0, "SECONDS",
     "give up retrying a remote request after this long, then EIO (0: no retries)"},
    /* a transfer that has received nothing for this long is stuck (a
     * dead peer, a lost route): retry it on a new connection; one that
     * trickles (under 256 body bytes a second over this long: a slowloris
     * answer) is stuck too (backend_io_i.h, IO_TRICKLE_RATE) */
    {"stall-timeout", 0, FS_OPT_SECONDS, CFG(be.stall_timeout_s), 0, "20", 1, 0, "SECONDS",
     "retry a remote transfer that received nothing for this long, or under 256 body bytes a "
     "second over this long"},
    /* TCP and TLS handshakes to a reachable store take milliseconds;
     * 10 s covers a loaded one and still fails fast when it is gone */
    {"connect-timeout", 0, FS_OPT_SECONDS, CFG(be.connect_timeout_s), 0, "10", 1, 0, "SECONDS",
     "give up a connection attempt after this long (then retry within --retry-budget)"},
    /* the lean engine (backend_io_lean.c) does a plain http:// ranged GET
     * without curl: 17,800 user-space instructions a request against curl's
     * 95,800, no poll(2), and 20-30 % less of the I/O loop's CPU in the
     * planned epoch (tests/bench/README.md); curl stays the engine of
     * everything else (backend/README.md says which requests it takes).
     * auto: every remote, lib and stress-faults test, and the mount tests
     * of remote sources, passed with it (2026-11-30) */
    {"http-engine", 0, FS_OPT_ENUM, CFG(be.http_engine), 0, "auto", 0, 0, "curl|auto",
     "curl: every remote request through libcurl; auto: unsigned ranged reads of objects at "
     "http:// and a literal IP address or a host name (no proxy variable set) through the "
     "daemon's own lean HTTP/1.1 engine, the rest through libcurl"},
    /* botocore waits for a credential_process without a bound; a helper
     * that asks a remote service (SSO, a vault) answers in seconds, and
     * one that never answers must not hang the mount: a minute */
    {"credential-timeout", 0, FS_OPT_SECONDS, CFG(be.credential_timeout_s), 0, "60", 1, 0,
     "SECONDS",
     "kill a credential_process (and what it started) that has not given credentials within "
     "this long: the mount fails, a refresh is retried"},
    {NULL, 0, 0, 0, 0, NULL, 0, 0, NULL, NULL},
};

static const struct fs_opt index_opts[] = {
    {"sidecar", 0, FS_OPT_FLAG, CFG(sidecar), 0, NULL, 0, 0, NULL,
     "also write NAME.tar.idx beside each shard (local sources)"},
    {NULL, 0, 0, 0, 0, NULL, 0, 0, NULL, NULL},
};

#define SOURCES                                                                                    \
	"SOURCE is a local directory (/data/shards, file:///data/shards), an HTTP(S) URL\n"        \
	"with brace ranges (https://host/d/shard-{000000..000099}.tar) or of a directory\n"        \
	"listing (https://host/d/), s3://bucket/prefix/, gs://bucket/prefix/ or\n"                 \
	"ais://bucket/prefix/.\n"

static const struct fs_opt *const mount_groups[] = {mount_opts, cache_opts, store_opts, NULL};
static const struct fs_opt *const index_groups[] = {index_opts, cache_opts, store_opts, NULL};

const struct fs_opt_cmd fs_opt_mount_cmd = {
    "mount",
    "[OPTIONS] SOURCE MOUNTPOINT",
    "Mount the WebDataset shards of SOURCE read-only at MOUNTPOINT. Returns once\n"
    "the mount is ready (unless -f).\n" SOURCES
    "Credentials come from the environment (see 'shardfs --help').\n",
    mount_groups,
    2,
};

const struct fs_opt_cmd fs_opt_index_cmd = {
    "index",
    "[OPTIONS] SOURCE",
    "Build the index of every shard of SOURCE into the cache directory.\n" SOURCES
    "Credentials come from the environment (see 'shardfs --help').\n",
    index_groups,
    1,
};

const char *const fs_opt_sources_help = SOURCES;

/* The left column of option o's help line: "-f, --foreground",
 * "    --cache-size SIZE". Returns its length. */
static int usage_left(const struct fs_opt *o, char *left, size_t cap)
{
	char shrt[8] = "    ";

	if (o->shrt)
		snprintf(shrt, sizeof(shrt), "-%c, ", o->shrt);
	return snprintf(left, cap, "%s--%s%s%s", shrt, o->lng, o->arg ? " " : "",
			o->arg ? o->arg : "");
}

/* Usage and options, one line an option: its help starts in one column for
 * all, right of the widest option (at most USAGE_COL_MAX wide; a wider one
 * has its help on the next line, in that column). */
#define USAGE_COL_MAX 40
void fs_opt_usage(const struct fs_opt_cmd *cmd, FILE *f)
{
	char left[128];
	int col = (int)strlen("-h, --help");

	fprintf(f, "usage: shardfs %s %s\n\n%s\noptions:\n", cmd->name, cmd->synopsis, cmd->about);
	for (const struct fs_opt *const *g = cmd->groups; *g; g++) {
		for (const struct fs_opt *o = *g; o->lng; o++) {
			int n = usage_left(o, left, sizeof(left));

			if (n > col && n <= USAGE_COL_MAX)
				col = n;
		}
	}
	for (const struct fs_opt *const *g = cmd->groups; *g; g++) {
		for (const struct fs_opt *o = *g; o->lng; o++) {
			if (usage_left(o, left, sizeof(left)) > col)
				fprintf(f, "  %s\n  %-*s %s", left, col, "", o->help);
			else
				fprintf(f, "  %-*s %s", col, left, o->help);
			if (o->def)
				fprintf(f, " (default: %s)", o->def);
			fprintf(f, "\n");
		}
	}
	fprintf(f, "  %-*s %s\n", col, "-h, --help", "show this help");
}

static int all_digits(const char *s, size_t n)
{
	if (n == 0)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!isdigit((unsigned char)s[i]))
			return 0;
	return 1;
}

int fs_parse_size(const char *s, uint64_t *out)
{
	size_t n = strlen(s), digits = n;
	unsigned shift = 0;
	unsigned long long v;

	if (n && !isdigit((unsigned char)s[n - 1])) {
		switch (s[n - 1]) {
		case 'T':
		case 't':
			shift = 40;
			break;
		case 'G':
		case 'g':
			shift = 30;
			break;
		case 'M':
		case 'm':
			shift = 20;
			break;
		case 'K':
		case 'k':
			shift = 10;
			break;
		default:
			return -EINVAL;
		}
		digits = n - 1;
	}
	if (!all_digits(s, digits))
		return -EINVAL;
	errno = 0;
	v = strtoull(s, NULL, 10);
	if (errno == ERANGE || (shift && v > (UINT64_MAX >> shift)))
		return -ERANGE;
	*out = (uint64_t)v << shift;
	return 0;
}

/* "4K" for 4096, "1G" for 2^30: the largest exact unit. */
static void size_str(uint64_t v, char *buf, size_t n)
{
	static const char units[] = "KMGT";
	int u = -1;

	while (u < 3 && v && v % 1024 == 0) {
		v /= 1024;
		u++;
	}
	if (u < 0)
		snprintf(buf, n, "%llu", (unsigned long long)v);
	else
		snprintf(buf, n, "%llu%c", (unsigned long long)v, units[u]);
}

/* The position of val among the '|'-separated names of o->arg, or -1. */
static int enum_index(const struct fs_opt *o, const char *val)
{
	const char *p = o->arg;
	size_t n = strlen(val);

	for (int i = 0;; i++) {
		size_t len = strcspn(p, "|");

		if (len == n && strncmp(p, val, n) == 0)
			return i;
		if (!p[len])
			return -1;
		p += len + 1;
	}
}

/* Say on stderr which values --OPT takes (type, range), then not val. */
static void say_wants(const struct fs_opt_cmd *cmd, const struct fs_opt *o, const char *val)
{
	char lo[32], hi[32], names[256];
	const char *from = o->max == NOLIMIT ? "at least " : "from ";
	const char *to = o->max == NOLIMIT ? "" : " to ";

	fprintf(stderr, "shardfs: %s: --%s wants ", cmd->name, o->lng);
	switch (o->type) {
	case FS_OPT_UINT:
	case FS_OPT_U64:
		snprintf(lo, sizeof(lo), "%llu", (unsigned long long)o->min);
		snprintf(hi, sizeof(hi), "%llu", (unsigned long long)o->max);
		fprintf(stderr, "a number %s%s%s%s", o->max == NOLIMIT ? "of at least " : "from ",
			lo, to,
			o->max == NOLIMIT ? " and at most 18446744073709551615 (2^64 - 1)" : hi);
		break;
	case FS_OPT_SECONDS:
		fprintf(stderr, "seconds (%s up to 1e9)", o->min ? "more than 0" : "0");
		break;
	case FS_OPT_SIZE:
	case FS_OPT_SIZE32:
		size_str(o->min, lo, sizeof(lo));
		size_str(o->max, hi, sizeof(hi));
		/* no bound of its own: still the 64 bits it is held in (a value
		 * over them is refused: say so, not only the lower bound) */
		fprintf(stderr, "a size: digits with an optional K, M, G or T suffix, %s%s%s%s",
			from, lo, to, o->max == NOLIMIT ? " and below 16777216T (2^64 bytes)" : hi);
		break;
	case FS_OPT_ENUM: {
		/* "a|b|c" as "a, b or c" */
		const char *last = strrchr(o->arg, '|');
		size_t w = 0;

		for (const char *p = o->arg; *p && w + 3 < sizeof(names); p++) {
			if (*p != '|') {
				names[w++] = *p;
			} else if (p == last) {
				w += (size_t)snprintf(names + w, sizeof(names) - w, " or ");
			} else {
				names[w++] = ',';
				names[w++] = ' ';
			}
			if (w >= sizeof(names))
				w = sizeof(names) - 1;
		}
		names[w] = '\0';
		fprintf(stderr, "%s", names);
		break;
	}
	case FS_OPT_STR:
		fprintf(stderr, "a %s that is not empty", o->arg);
		break;
	default:
		fprintf(stderr, "a value");
	}
	fprintf(stderr, ", not '%s'\n", FS_QV(val));
}

/* Seconds: decimal only (strtod alone would also take 0x10, 1e3, 0x1p3),
 * 0 to 1e9; with min, more than 0. */
static int parse_seconds(const struct fs_opt *o, const char *val, double *out)
{
	size_t digits = strspn(val, "0123456789"), frac = 0;
	char *end;
	double v;

	if (val[digits] == '.')
		frac = 1 + strspn(val + digits + 1, "0123456789");
	if (!digits || val[digits + frac])
		return -EINVAL;
	errno = 0;
	v = strtod(val, &end);
	if (errno || *end || !isfinite(v) || v > 1e9 || (o->min && v <= 0))
		return -EINVAL;
	*out = v;
	return 0;
}

/* An unsigned value in range: digits only (UINT, U64), or a size (SIZE*). */
static int parse_ranged(const struct fs_opt *o, const char *val, uint64_t *out)
{
	int size = o->type == FS_OPT_SIZE || o->type == FS_OPT_SIZE32;
	unsigned long long v;

	if (size) {
		if (fs_parse_size(val, out) < 0)
			return -EINVAL;
	} else {
		if (!all_digits(val, strlen(val)))
			return -EINVAL;
		errno = 0;
		v = strtoull(val, NULL, 10);
		if (errno == ERANGE)
			return -EINVAL;
		*out = v;
	}
	return *out < o->min || *out > o->max ? -EINVAL : 0;
}

/* A string option: val strdup'd into the field (the previous value freed);
 * APPEND joins the values with ','. */
static int set_str(const struct fs_opt *o, char **field, const char *val)
{
	size_t n = (o->type == FS_OPT_APPEND && *field ? strlen(*field) + 1 : 0) + strlen(val) + 1;
	char *s = malloc(n);

	if (!s)
		return -ENOMEM;
	if (o->type == FS_OPT_APPEND && *field)
		snprintf(s, n, "%s,%s", *field, val);
	else
		memcpy(s, val, n);
	free(*field);
	*field = s;
	return 0;
}

static int opt_set(const struct fs_opt_cmd *cmd, void *cfg, const struct fs_opt *o, const char *val)
{
	char *field = (char *)cfg + o->off;
	uint64_t v;
	int err = 0;

	switch (o->type) {
	case FS_OPT_FLAG:
		*(int *)field = 1;
		break;
	case FS_OPT_STR: /* a path or URL: '' would mean the root (--cache-dir "$UNSET") */
		if (!*val) {
			say_wants(cmd, o, val);
			return -EINVAL;
		}
		/* fall through */
	case FS_OPT_APPEND:
		err = set_str(o, (char **)(void *)field, val);
		if (err < 0)
			return err;
		break;
	case FS_OPT_UINT:
	case FS_OPT_U64:
	case FS_OPT_SIZE:
	case FS_OPT_SIZE32:
		err = parse_ranged(o, val, &v);
		if (err == 0 && o->type == FS_OPT_UINT)
			*(unsigned *)(void *)field = (unsigned)v; /* max fits: the table's range */
		else if (err == 0 && o->type == FS_OPT_SIZE32)
			*(uint32_t *)(void *)field = (uint32_t)v;
		else if (err == 0)
			*(uint64_t *)(void *)field = v;
		break;
	case FS_OPT_SECONDS:
		err = parse_seconds(o, val, (double *)(void *)field);
		break;
	case FS_OPT_ENUM: {
		int i = enum_index(o, val);

		if (i < 0)
			err = -EINVAL;
		else
			*(int *)(void *)field = i;
		break;
	}
	default:
		return -EINVAL;
	}
	if (err < 0) {
		say_wants(cmd, o, val);
		return err;
	}
	if (o->given_off)
		*(int *)((char *)cfg + o->given_off - 1) = 1;
	return 0;
}

static const struct fs_opt *opt_find(const struct fs_opt_cmd *cmd, const char *arg,
				     const char **val)
{
	*val = NULL;
	for (const struct fs_opt *const *g = cmd->groups; *g; g++) {
		for (const struct fs_opt *o = *g; o->lng; o++) {
			if (arg[1] == '-') {
				const char *name = arg + 2, *eq = strchr(name, '=');
				size_t n = eq ? (size_t)(eq - name) : strlen(name);

				if (strlen(o->lng) == n && strncmp(o->lng, name, n) == 0) {
					if (eq)
						*val = eq + 1;
					return o;
				}
			} else if (o->shrt && arg[1] == o->shrt) {
				if (arg[2])
					*val = arg + 2;
				return o;
			}
		}
	}
	return NULL;
}

int fs_opt_parse(const struct fs_opt_cmd *cmd, void *cfg, int argc, char **argv, const char **pos)
{
	int npos = 0, only_pos = 0, err;

	/* the defaults, exactly as if given first on the command line */
	for (const struct fs_opt *const *g = cmd->groups; *g; g++) {
		for (const struct fs_opt *o = *g; o->lng; o++) {
			if (!o->def)
				continue;
			err = opt_set(cmd, cfg, o, o->def);
			if (err < 0)
				return err;
			if (o->given_off) /* a default is not "given" */
				*(int *)((char *)cfg + o->given_off - 1) = 0;
		}
	}
	for (int i = 0; i < argc; i++) {
		const char *a = argv[i], *val;
		const struct fs_opt *o;

		if (only_pos || a[0] != '-' || a[1] == '\0') {
			if (npos == cmd->npos) {
				fprintf(stderr, "shardfs: %s: unexpected argument '%s'\n",
					cmd->name, FS_QV(a));
				return -EINVAL;
			}
			pos[npos++] = a;
			continue;
		}
		if (strcmp(a, "--") == 0) {
			only_pos = 1;
			continue;
		}
		if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
			if (i + 1 < argc) { /* nothing after it, as the client commands' --help */
				fprintf(stderr,
					"shardfs: %s: %s takes no arguments after it (see "
					"'shardfs %s --help')\n",
					cmd->name, a, cmd->name);
				return -EINVAL;
			}
			fs_opt_usage(cmd, stdout);
			return 1;
		}
		o = opt_find(cmd, a, &val);
		if (!o) {
			fprintf(stderr,
				"shardfs: %s: unknown option '%s' (see 'shardfs %s --help')\n",
				cmd->name, FS_QV(a), cmd->name);
			return -EINVAL;
		}
		if (o->type == FS_OPT_FLAG && val) {
			fprintf(stderr, "shardfs: %s: option '%s' takes no value\n", cmd->name,
				FS_QV(a));
			return -EINVAL;
		}
		if (o->type != FS_OPT_FLAG && !val) {
			if (i + 1 >= argc) {
				fprintf(stderr, "shardfs: %s: option '%s' needs %s\n", cmd->name, a,
					o->arg);
				return -EINVAL;
			}
			val = argv[++i];
		}
		err = opt_set(cmd, cfg, o, val);
		if (err < 0)
			return err;
	}
	if (npos != cmd->npos) {
		fprintf(stderr, "shardfs: %s needs %s\n", cmd->name, cmd->synopsis);
		fs_opt_usage(cmd, stderr);
		return -EINVAL;
	}
	return 0;
}

/* The default cache directory, when --cache-dir was not given. */
static int default_cache_dir(struct fs_config *cfg)
{
	const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
	char buf[4096];

	if (cfg->ct.cache_dir)
		return 0;
	if (xdg && xdg[0] == '/')
		snprintf(buf, sizeof(buf), "%s/shardfs", xdg);
	else if (home && home[0] == '/')
		snprintf(buf, sizeof(buf), "%s/.cache/shardfs", home);
	else
		snprintf(buf, sizeof(buf), "/var/cache/shardfs");
	cfg->ct.cache_dir = strdup(buf);
	return cfg->ct.cache_dir ? 0 : -ENOMEM;
}

/* --chunk-size not given: a cache holds at least this many chunks (the
 * rule of the option table's chunk-size), the chunk a power of two of at
 * least CHUNK_RULE_MIN */
#define CHUNK_PER_CACHE 8
#define CHUNK_RULE_MIN	(64u << 10)

/* The most the cache directory's filesystem holds above the reserve the cache tier keeps there
 * (its size less the smaller of --min-free and --min-free-percent of it, as cachetier.c
 * computes it), from the directory or its nearest existing parent; 0: unknown. */
static uint64_t cache_disk_room(const struct fs_config *cfg)
{
	char path[4096];
	struct statvfs sv;
	uint64_t size, pct, reserve;
	unsigned percent = cfg->ct.min_free_percent ? cfg->ct.min_free_percent : 100;

	if (snprintf(path, sizeof(path), "%s", cfg->ct.cache_dir) >= (int)sizeof(path))
		return 0;
	while (statvfs(path, &sv) < 0) {
		char *slash = strrchr(path, '/');

		if (errno != ENOENT || !slash || slash == path)
			return 0;
		*slash = '\0';
	}
	size = (uint64_t)sv.f_blocks * sv.f_frsize;
	pct = size / 100 * (percent > 100 ? 100 : percent);
	reserve = pct < cfg->ct.min_free_bytes ? pct : cfg->ct.min_free_bytes;
	return size > reserve ? size - reserve : 0;
}

/* A --cache-size above what its filesystem can hold is lowered to that:
 * the chunks (when --chunk-size is not given), the readahead window and
 * the plans' lookahead are sized from the cache size, and sized from one
 * the disk cannot hold they fetch ahead what evicts itself before it is
 * read (a 47 MiB planned epoch over a 6 MiB cache disk with the default
 * 20G fetched 55 times its bytes). */
static void cache_size_to_disk(const char *cmd, struct fs_config *cfg)
{
	uint64_t room = cache_disk_room(cfg);
	char a[32], b[32];

	if (room == 0 || cfg->ct.cache_size_bytes <= room)
		return;
	fs_human_bytes(cfg->ct.cache_size_bytes, a, sizeof(a));
	fs_human_bytes(room, b, sizeof(b));
	fprintf(stderr,
		"shardfs: %s: --cache-size %s is more than the filesystem of %s holds above its "
		"reserve: the cache keeps at most %s\n",
		cmd, a, FS_Q(cfg->ct.cache_dir), b);
	cfg->ct.cache_size_bytes = room;
}

/* Checks that need the whole command line, shared by mount and index. */
static int check_common(const char *cmd, struct fs_config *cfg)
{
	int err;

	if (cfg->be.ca_file && access(cfg->be.ca_file, R_OK) < 0) {
		fprintf(stderr, "shardfs: %s: --ca-file %s: cannot read the CA file: %s\n", cmd,
			FS_Q(cfg->be.ca_file), strerror(errno));
		return -EINVAL;
	}
	if (cfg->be.max_connections < cfg->be.connections) {
		if (cfg->max_connections_given) {
			fprintf(stderr,
				"shardfs: %s: --max-connections %u is below --connections %u: give "
				"at least %u (it bounds every transfer, --connections only some)\n",
				cmd, cfg->be.max_connections, cfg->be.connections,
				cfg->be.connections);
			return -EINVAL;
		}
		cfg->be.max_connections = cfg->be.connections;
	}
	/* the prefetch's fills run within --connections: a larger count given
	 * would bound nothing, and the user who gave it expects it to */
	if (cfg->ct.cursor_fills > cfg->be.connections) {
		if (cfg->prefetch_connections_given) {
			fprintf(stderr,
				"shardfs: %s: --prefetch-connections %u is above --connections %u: "
				"give at most %u (prefetch fills run within --connections)\n",
				cmd, cfg->ct.cursor_fills, cfg->be.connections,
				cfg->be.connections);
			return -EINVAL;
		}
		cfg->ct.cursor_fills = cfg->be.connections;
	}
	err = default_cache_dir(cfg);
	if (err < 0)
		return err;
	/* the directory's own faults first: its size means nothing on a
	 * directory that cannot be used. Nothing is made here: a command
	 * refused after its options (an index of a mount, say) leaves no
	 * directory behind; the mount makes it (fs_core.c) */
	err = fs_cachedir_trust(&cfg->ct.cache_dir, 0);
	if (err < 0)
		return err;
	cache_size_to_disk(cmd, cfg);
	if (!cfg->chunk_size_given &&
	    cfg->ct.cache_size_bytes / CHUNK_PER_CACHE < cfg->ct.chunk_bytes) {
		uint32_t c = CHUNK_RULE_MIN;

		while ((uint64_t)c * 2 <= cfg->ct.cache_size_bytes / CHUNK_PER_CACHE &&
		       c * 2 <= cfg->ct.chunk_bytes)
			c *= 2;
		cfg->ct.chunk_bytes = c;
	}
	/* one more fill thread than connections: one writes its chunk to disk
	 * while every connection is busy fetching the next */
	cfg->ct.fill_threads = cfg->be.connections + 1;
	/* fills of small planned ranges: as many as the store runs in all */
	cfg->ct.small_fills = cfg->be.max_connections;
	cfg->cache_size_bytes = cfg->ct.cache_size_bytes;
	return 0;
}

void fs_say_dead_mount(const char *mnt)
{
	fprintf(stderr,
		"shardfs: the daemon of %s is gone (the mount answers \"%s\"); "
		"'shardfs umount %s' cleans up\n",
		mnt, strerror(ENOTCONN), mnt);
}

int fs_opt_parse_mount(int argc, char **argv, struct fs_config *cfg)
{
	const char *pos[2];
	int err;

	err = fs_opt_parse(&fs_opt_mount_cmd, cfg, argc, argv, pos);
	if (err)
		return err;
	if (cfg->debug)
		cfg->foreground = 1;
	err = check_common("mount", cfg);
	if (err < 0)
		return err;
	cfg->source = strdup(pos[0]);
	if (!cfg->source)
		return -ENOMEM;
	cfg->mountpoint = realpath(pos[1], NULL);
	if (!cfg->mountpoint) {
		err = -errno;
		if (err == -ENOTCONN)
			fs_say_dead_mount(FS_Q(pos[1]));
		else
			fprintf(stderr, "shardfs: mountpoint %s: %s\n", FS_Q(pos[1]),
				strerror(-err));
		return err;
	}
	return 0;
}

int fs_opt_parse_index(int argc, char **argv, struct fs_config *cfg)
{
	const char *pos[1];
	int err = fs_opt_parse(&fs_opt_index_cmd, cfg, argc, argv, pos);

	if (err)
		return err;
	err = check_common("index", cfg);
	if (err < 0)
		return err;
	cfg->source = strdup(pos[0]);
	return cfg->source ? 0 : -ENOMEM;
}

void fs_opt_free(struct fs_config *cfg)
{
	free(cfg->source);
	free(cfg->mountpoint);
	free(cfg->log_file);
	free(cfg->fuse_opts);
	/* the option table's strings (FS_OPT_STR): strdup'd by set_str */
	free((char *)cfg->ct.cache_dir);
	free((char *)cfg->be.endpoint);
	free((char *)cfg->be.ca_file);
	memset(cfg, 0, sizeof(*cfg));
}
