#!/usr/bin/env python3
"""Writes fuzz inputs that set the lengths and counts a pool stores to
absurd values: symlink lengths, directory entry counts, hash depths and slot
array sizes, block-map heights, bucket used/count fields, entry name lengths,
the orphan counter, and free inode-slot links.  Each is aimed through the
base image pool_fuzz builds (POOL_FUZZ_SAVE_BASE=file saves it), so the
inputs hit those fields exactly rather than by luck.

usage: make_mutants.py BASE_IMAGE OUT_DIR
"""
import os
import struct
import sys

BLOCK = 4096
INODE = 128
K_STATE, K_ANY = 3, 9  # pool_fuzz.c's kinds (input byte % K_KINDS)
S_IFMT, S_IFDIR, S_IFLNK, S_IFREG = 0o170000, 0o040000, 0o120000, 0o100000

# struct kura_inode field offsets (src/layout.h)
F_SIZE, F_BLOCKS, F_ROOT, F_HEIGHT, F_DEPTH = 16, 24, 80, 88, 89
F_ENTRIES, F_LINK, F_PREV = 104, 112, 120
# struct kura_state
S_INODE_FREE, S_ORPHANS, S_NORPHANS = 8, 16, 48


def patch_any(img, off, new):
    """A K_ANY patch: 64-byte aligned start, so the bytes from the line's
    start up to `off` are copied from the base and `new` follows."""
    start = off - off % 64
    data = img[start:off] + new
    assert len(data) <= 255
    where = start // 64
    return bytes([K_ANY, where & 0xFF, where >> 8, len(data)]) + data


def patch_state(off, new):
    return bytes([K_STATE, off & 0xFF, off >> 8, len(new)]) + new


def u64(v):
    return struct.pack("<Q", v & (2**64 - 1))


def main():
    base_path, out = sys.argv[1], sys.argv[2]
    img = open(base_path, "rb").read()
    (first_data,) = struct.unpack_from("<Q", img, 64)  # kura_super.first_data_block
    (root_ino,) = struct.unpack_from("<Q", img, 72)  # kura_super.root_ino
    inodes = {}  # inode offset -> (mode, size), found by walking the tree

    def visit(ino):
        off = ino * INODE
        if off in inodes:
            return
        mode, _ = struct.unpack_from("<II", img, off)
        (size,) = struct.unpack_from("<Q", img, off + F_SIZE)
        inodes[off] = (mode, size)
        if mode & S_IFMT != S_IFDIR or not size:
            return
        (array,) = struct.unpack_from("<Q", img, off + F_ROOT)  # small dirs: height 0
        depth = img[off + F_DEPTH]
        for i in range(1 << depth):
            (b,) = struct.unpack_from("<Q", img, array * BLOCK + 8 * i)
            _, _, used = struct.unpack_from("<IHH", img, b * BLOCK)
            pos = 0
            while pos + 18 <= used:
                e = b * BLOCK + 16 + pos
                (child,) = struct.unpack_from("<Q", img, e + 8)
                visit(child)
                pos += (18 + img[e + 16] + 7) & ~7

    visit(root_ino)
    def pick(pred):
        return [o for o, (m, s) in sorted(inodes.items()) if pred(m, s)]

    longlink = pick(lambda m, s: m & S_IFMT == S_IFLNK and s == 2999)
    links = pick(lambda m, s: m & S_IFMT == S_IFLNK and s == 8)
    dirs = pick(lambda m, s: m & S_IFMT == S_IFDIR and s >= 16)
    files = pick(lambda m, s: m & S_IFMT == S_IFREG and s > 1 << 30)
    if not (longlink and links and dirs and files):
        sys.exit("make_mutants: the base image does not look like pool_fuzz's")
    big = max(dirs, key=lambda o: (inodes[o][1], o))  # /big: the largest slot array
    (state_free,) = struct.unpack_from("<Q", img, 2 * BLOCK + S_INODE_FREE)
    free_off = state_free * INODE
    (bucket_slot_block,) = struct.unpack_from("<Q", img, big + F_ROOT)
    (bucket,) = struct.unpack_from("<Q", img, bucket_slot_block * BLOCK)
    bk = bucket * BLOCK

    cases = {
        "symlink-length-huge": patch_any(img, longlink[0] + F_SIZE, u64(1 << 40)),
        "symlink-length-past-max": patch_any(img, longlink[0] + F_SIZE, u64(5000)),
        "symlink-length-zero": patch_any(img, links[0] + F_SIZE, u64(0)),
        "symlink-length-max64": patch_any(img, links[0] + F_SIZE, u64(-1)),
        "dir-entries-zero": patch_any(img, big + F_ENTRIES, u64(0)),
        "dir-entries-huge": patch_any(img, big + F_ENTRIES, u64(-1)),
        "dir-depth-40": patch_any(img, big + F_ROOT, img[big + F_ROOT:big + F_HEIGHT] + bytes([img[big + F_HEIGHT], 40])),
        "dir-depth-255": patch_any(img, big + F_ROOT, img[big + F_ROOT:big + F_HEIGHT] + bytes([img[big + F_HEIGHT], 255])),
        "dir-size-huge": patch_any(img, big + F_SIZE, u64(1 << 50)),
        "dir-blocks-huge": patch_any(img, big + F_BLOCKS, u64(-1)),
        "map-height-5": patch_any(img, files[0] + F_ROOT, img[files[0] + F_ROOT:files[0] + F_HEIGHT] + bytes([5])),
        "map-height-255": patch_any(img, files[0] + F_ROOT, img[files[0] + F_ROOT:files[0] + F_HEIGHT] + bytes([255])),
        "file-size-huge": patch_any(img, files[0] + F_SIZE, u64(-1)),
        "bucket-used-huge": patch_any(img, bk, img[bk:bk + 6] + struct.pack("<HI", 0xFFFF, 0xFFFFFFFF)),
        "bucket-used-odd": patch_any(img, bk, img[bk:bk + 6] + struct.pack("<H", 4079)),
        "bucket-count-zero": patch_any(img, bk + 8, struct.pack("<I", 0)),
        "dirent-name-len-255": patch_any(img, bk + 16 + 16, bytes([255])),
        "dirent-name-len-zero": patch_any(img, bk + 16 + 16, bytes([0])),
        "orphans-count-huge": patch_state(S_NORPHANS, u64(-1)),
        "free-head-prev-set": patch_any(img, free_off + F_PREV, u64(state_free + 1)),
        "free-head-link-self": patch_any(img, free_off + F_LINK, u64(state_free)),
        "free-head-link-live": patch_any(img, free_off + F_LINK, u64(big // INODE)),
        "free-head-is-live": patch_state(S_INODE_FREE, u64(big // INODE)),
        "free-head-huge": patch_state(S_INODE_FREE, u64(1 << 60)),
    }
    os.makedirs(out, exist_ok=True)
    for name, data in cases.items():
        with open(os.path.join(out, "mutant-" + name), "wb") as f:
            f.write(data)
    print(f"make_mutants: {len(cases)} inputs in {out}")


if __name__ == "__main__":
    main()
