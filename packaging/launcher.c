/*
 * kb launcher: the front of the single-file `kb`.
 *
 *   dist/kb = [this program][compressed onedir payload][64-byte trailer]
 *
 * First run: unpack the payload (the PyInstaller onedir tree) into
 *   ${XDG_CACHE_HOME:-$HOME/.cache}/kb/frozen/<content-hash>/
 * through a private temporary directory and one atomic rename(2), so concurrent first runs are
 * safe (the loser of the rename discards its copy and uses the winner's). Every run then
 * execv(2)s <dir>/kb with the same arguments and environment: after the first run the only cost
 * over the onedir program is this process's start, one pread of the trailer and one access(2).
 *
 * Cache root, first usable of: $KB_FROZEN_CACHE; $XDG_CACHE_HOME/kb (absolute XDG_CACHE_HOME
 * only); $HOME/.cache/kb; /tmp/kb-<uid> (created 0700, used only if owned by the user and not
 * writable by others, since /tmp is shared). An unwritable root (read-only home) or one where
 * exec is refused (noexec mount) falls through to the next.
 *
 * No Python, no shell, no tar: the payload is a simple entry stream (written by
 * packaging/mkpayload.py) compressed with zstd (frame checksum) or zlib (adler32), decoded here
 * with a statically linked libzstd or zlib. Build: see packaging/build.sh.
 *
 * Payload stream (little-endian), after decompression:
 *   "KBPAYLD1"
 *   'D' u16 mode, u16 len, path                      directory
 *   'F' u16 mode, u16 len, path, u64 size, data       regular file
 *   'L' u16 len, path, u16 len, target               symbolic link (relative target)
 *   'E'                                              end
 * Trailer (last 64 bytes): "KBFROZE1", u64 payload offset, u64 payload length,
 *   u64 decompressed length, u8 codec ('z' zstd, 'g' zlib), char hash[16] (hex), 15 zero bytes.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#if defined(KB_CODEC_ZSTD)
#include <zstd.h>
#define CODEC_CHAR 'z'
#elif defined(KB_CODEC_ZLIB)
#include <zlib.h>
#define CODEC_CHAR 'g'
#else
#error "define KB_CODEC_ZSTD or KB_CODEC_ZLIB"
#endif

#define TRAILER_SIZE 64
#define HASH_LEN 16
#define IN_CHUNK (1 << 20)

static const char *prog = "kb";

static void warnf(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", prog);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

static uint64_t le64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

struct trailer {
    uint64_t off, len, raw_len;
    char codec;
    char hash[HASH_LEN + 1];
};

static int read_trailer(int fd, struct trailer *t) {
    struct stat st;
    unsigned char b[TRAILER_SIZE];
    if (fstat(fd, &st) != 0 || st.st_size < TRAILER_SIZE) return -1;
    if (pread(fd, b, TRAILER_SIZE, st.st_size - TRAILER_SIZE) != TRAILER_SIZE) return -1;
    if (memcmp(b, "KBFROZE1", 8) != 0) return -1;
    t->off = le64(b + 8);
    t->len = le64(b + 16);
    t->raw_len = le64(b + 24);
    t->codec = (char)b[32];
    memcpy(t->hash, b + 33, HASH_LEN);
    t->hash[HASH_LEN] = 0;
    for (int i = 0; i < HASH_LEN; i++)
        if (!((t->hash[i] >= '0' && t->hash[i] <= '9') || (t->hash[i] >= 'a' && t->hash[i] <= 'f'))) return -1;
    if (t->off + t->len + TRAILER_SIZE != (uint64_t)st.st_size) return -1;
    return 0;
}

/* ---- small path helpers ------------------------------------------------------------------ */

static int join(char *out, size_t cap, const char *a, const char *b) {
    int n = snprintf(out, cap, "%s/%s", a, b);
    return (n < 0 || (size_t)n >= cap) ? -1 : 0;
}

/* mkdir -p with mode 0700 for the components it creates. */
static int mkdirs(const char *path) {
    char buf[PATH_MAX];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof buf) return -1;
    memcpy(buf, path, n + 1);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0700) != 0 && errno != EEXIST) return -1;
        *p = '/';
    }
    if (mkdir(buf, 0700) != 0 && errno != EEXIST) return -1;
    return 0;
}

/* A payload path must be relative and must not climb: no "", "/x", "..", "a/../b". */
static int safe_rel(const char *p) {
    if (!*p || *p == '/') return 0;
    for (const char *s = p; *s;) {
        const char *e = strchr(s, '/');
        size_t n = e ? (size_t)(e - s) : strlen(s);
        if (n == 0 || (n == 1 && s[0] == '.') || (n == 2 && s[0] == '.' && s[1] == '.')) return 0;
        s += n;
        if (*s == '/') s++;
    }
    return 1;
}

/* A symlink target (relative to the link's directory) must stay inside the tree. */
static int safe_link(const char *link, const char *target) {
    if (!*target || *target == '/') return 0;
    int depth = 0;
    for (const char *s = link; *s; s++)
        if (*s == '/') depth++;
    for (const char *s = target; *s;) {
        const char *e = strchr(s, '/');
        size_t n = e ? (size_t)(e - s) : strlen(s);
        if (n == 2 && s[0] == '.' && s[1] == '.') {
            if (--depth < 0) return 0;
        } else if (n > 0 && !(n == 1 && s[0] == '.')) {
            depth++;
        }
        s += n;
        if (*s == '/') s++;
    }
    return 1;
}

/* rm -rf of a directory we created (no symlink is followed: unlinkat on links removes the link). */
static void rmtree_at(int parent, const char *name) {
    int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0) {
        DIR *d = fdopendir(fd);
        if (d) {
            struct dirent *e;
            while ((e = readdir(d)) != NULL) {
                if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
                if (unlinkat(fd, e->d_name, 0) != 0 && (errno == EISDIR || errno == EPERM)) rmtree_at(fd, e->d_name);
            }
            closedir(d);
        } else {
            close(fd);
        }
    }
    unlinkat(parent, name, AT_REMOVEDIR);
}

static void rmtree(const char *path) { rmtree_at(AT_FDCWD, path); }

/* ---- decompression: a byte source over the payload ---------------------------------------- */

struct src {
    int fd;
    uint64_t pos, end;   /* compressed range still to read */
    unsigned char *in;   /* compressed chunk */
    unsigned char *out;  /* decompressed buffer */
    size_t out_cap, out_pos, out_len;
    uint64_t produced;
    int done, error;
#if defined(KB_CODEC_ZSTD)
    ZSTD_DCtx *dctx;
    ZSTD_inBuffer ib;
    size_t last_ret;
#else
    z_stream zs;
#endif
};

static int src_init(struct src *s, int fd, const struct trailer *t) {
    memset(s, 0, sizeof *s);
    s->fd = fd;
    s->pos = t->off;
    s->end = t->off + t->len;
    s->out_cap = IN_CHUNK;
    s->in = malloc(IN_CHUNK);
    s->out = malloc(s->out_cap);
    if (!s->in || !s->out) return -1;
#if defined(KB_CODEC_ZSTD)
    s->dctx = ZSTD_createDCtx();
    if (!s->dctx) return -1;
    s->ib.src = s->in;
    s->ib.size = s->ib.pos = 0;
    s->last_ret = 1;
#else
    if (inflateInit(&s->zs) != Z_OK) return -1;
#endif
    return 0;
}

static void src_free(struct src *s) {
#if defined(KB_CODEC_ZSTD)
    if (s->dctx) ZSTD_freeDCtx(s->dctx);
#else
    inflateEnd(&s->zs);
#endif
    free(s->in);
    free(s->out);
}

static ssize_t fill_input(struct src *s) {
    uint64_t left = s->end - s->pos;
    size_t want = left < IN_CHUNK ? (size_t)left : IN_CHUNK;
    if (want == 0) return 0;
    ssize_t r = pread(s->fd, s->in, want, (off_t)s->pos);
    if (r <= 0) return -1;
    s->pos += (uint64_t)r;
    return r;
}

/* Refill s->out; returns bytes available, 0 at the end of the stream, -1 on error. */
static ssize_t src_more(struct src *s) {
    if (s->error) return -1;
    s->out_pos = s->out_len = 0;
    while (s->out_len == 0) {
        if (s->done) return 0;
#if defined(KB_CODEC_ZSTD)
        if (s->ib.pos == s->ib.size) {
            ssize_t r = fill_input(s);
            if (r < 0) return s->error = 1, -1;
            if (r == 0) {
                if (s->last_ret != 0) return s->error = 1, -1; /* truncated frame */
                s->done = 1;
                return 0;
            }
            s->ib.size = (size_t)r;
            s->ib.pos = 0;
        }
        ZSTD_outBuffer ob = {s->out, s->out_cap, 0};
        size_t ret = ZSTD_decompressStream(s->dctx, &ob, &s->ib); /* checks the frame checksum */
        if (ZSTD_isError(ret)) {
            warnf("payload does not decompress: %s", ZSTD_getErrorName(ret));
            return s->error = 1, -1;
        }
        s->last_ret = ret;
        s->out_len = ob.pos;
#else
        if (s->zs.avail_in == 0) {
            ssize_t r = fill_input(s);
            if (r < 0) return s->error = 1, -1;
            if (r == 0) return s->error = 1, -1; /* Z_STREAM_END comes before the input ends */
            s->zs.next_in = s->in;
            s->zs.avail_in = (uInt)r;
        }
        s->zs.next_out = s->out;
        s->zs.avail_out = (uInt)s->out_cap;
        int ret = inflate(&s->zs, Z_NO_FLUSH); /* checks adler32 at the end */
        if (ret != Z_OK && ret != Z_STREAM_END && ret != Z_BUF_ERROR) {
            warnf("payload does not decompress: %s", s->zs.msg ? s->zs.msg : "zlib error");
            return s->error = 1, -1;
        }
        s->out_len = s->out_cap - s->zs.avail_out;
        if (ret == Z_STREAM_END) s->done = 1;
#endif
    }
    s->produced += s->out_len;
    return (ssize_t)s->out_len;
}

/* Read exactly n bytes (into buf, or to fd when buf is NULL). */
static int src_read(struct src *s, void *buf, uint64_t n, int fd) {
    unsigned char *p = buf;
    while (n > 0) {
        if (s->out_pos == s->out_len && src_more(s) <= 0) return -1;
        size_t k = s->out_len - s->out_pos;
        if (k > n) k = (size_t)n;
        if (p) {
            memcpy(p, s->out + s->out_pos, k);
            p += k;
        } else {
            for (size_t w = 0; w < k;) {
                ssize_t r = write(fd, s->out + s->out_pos + w, k - w);
                if (r < 0) {
                    if (errno == EINTR) continue;
                    return -1;
                }
                w += (size_t)r;
            }
        }
        s->out_pos += k;
        n -= k;
    }
    return 0;
}

static int rd_u16(struct src *s, unsigned *v) {
    unsigned char b[2];
    if (src_read(s, b, 2, -1)) return -1;
    *v = (unsigned)b[0] | ((unsigned)b[1] << 8);
    return 0;
}

static int rd_str(struct src *s, char *buf, size_t cap) {
    unsigned n;
    if (rd_u16(s, &n) || n == 0 || n >= cap) return -1;
    if (src_read(s, buf, n, -1)) return -1;
    buf[n] = 0;
    return (memchr(buf, 0, n) != NULL) ? -1 : 0;
}

/* Unpack the payload into the directory dirfd. 0 on success. */
static int unpack(int selffd, const struct trailer *t, int dirfd) {
    struct src s;
    int rc = -1;
    if (src_init(&s, selffd, t) != 0) {
        warnf("out of memory");
        src_free(&s);
        return -1;
    }
    char magic[8], path[PATH_MAX], target[PATH_MAX];
    if (src_read(&s, magic, 8, -1) || memcmp(magic, "KBPAYLD1", 8) != 0) {
        warnf("payload is not a kb payload");
        goto out;
    }
    for (;;) {
        unsigned char type;
        unsigned mode;
        if (src_read(&s, &type, 1, -1)) goto bad;
        if (type == 'E') break;
        if (type == 'D' || type == 'F') {
            if (rd_u16(&s, &mode) || rd_str(&s, path, sizeof path) || !safe_rel(path)) goto bad;
            mode &= 07777 & ~(unsigned)(S_ISUID | S_ISGID);
            if (type == 'D') {
                if (mkdirat(dirfd, path, 0700) != 0 && errno != EEXIST) goto io;
                if (fchmodat(dirfd, path, mode | 0700, 0) != 0) goto io;
                continue;
            }
            unsigned char b[8];
            if (src_read(&s, b, 8, -1)) goto bad;
            uint64_t size = le64(b);
            int fd = openat(dirfd, path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode | 0600);
            if (fd < 0) goto io;
            int r = src_read(&s, NULL, size, fd);
            if (close(fd) != 0 || r != 0) {
                if (s.error) goto out;
                goto io;
            }
            if (fchmodat(dirfd, path, mode, 0) != 0) goto io;
        } else if (type == 'L') {
            if (rd_str(&s, path, sizeof path) || !safe_rel(path)) goto bad;
            if (rd_str(&s, target, sizeof target) || !safe_link(path, target)) goto bad;
            if (symlinkat(target, dirfd, path) != 0) goto io;
        } else {
            goto bad;
        }
    }
    /* The end marker must be the end of the stream (and, for zstd, the frame must be complete
       with its checksum verified): drain whatever is left. */
    unsigned char extra;
    if (src_read(&s, &extra, 1, -1) == 0 || s.error) goto bad;
    if (s.produced != t->raw_len) goto bad;
    rc = 0;
    goto out;
bad:
    if (!s.error) warnf("payload is corrupt (copy dist/kb again)");
    else warnf("payload is corrupt or truncated (copy dist/kb again)");
    goto out;
io:
    warnf("cannot write %s: %s", path, strerror(errno));
out:
    src_free(&s);
    return rc;
}

/* ---- cache roots -------------------------------------------------------------------------- */

/* Fallback root in shared /tmp: must be ours, a real directory, and not writable by others. */
static int private_dir_ok(const char *root) {
    struct stat st;
    if (mkdir(root, 0700) != 0 && errno != EEXIST) return 0;
    if (lstat(root, &st) != 0) return 0;
    return S_ISDIR(st.st_mode) && st.st_uid == geteuid() && (st.st_mode & 022) == 0;
}

static void prune_stale_tmp(const char *frozen) {
    DIR *d = opendir(frozen);
    if (!d) return;
    time_t now = time(NULL);
    struct dirent *e;
    int dfd = dirfd(d);
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, ".tmp-", 5) != 0) continue;
        struct stat st;
        if (fstatat(dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode) && now - st.st_mtime > 3600)
            rmtree_at(dfd, e->d_name); /* left by an unpack that was killed an hour ago or more */
    }
    closedir(d);
}

/* Unpack into <root>/frozen/<hash>. 0 when the directory exists afterwards (ours or a racer's). */
static int install(int selffd, const struct trailer *t, const char *root, const char *final) {
    char frozen[PATH_MAX], tmpl[PATH_MAX];
    if (join(frozen, sizeof frozen, root, "frozen") || mkdirs(frozen) != 0) return -1;
    if (snprintf(tmpl, sizeof tmpl, "%s/.tmp-%s-XXXXXX", frozen, t->hash) >= (int)sizeof tmpl) return -1;
    if (!mkdtemp(tmpl)) return -1;
    if (isatty(2)) fprintf(stderr, "%s: first run of this build: unpacking to %s (once)\n", prog, final);
    int dfd = open(tmpl, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0 || unpack(selffd, t, dfd) != 0) {
        if (dfd >= 0) close(dfd);
        rmtree(tmpl);
        return -1;
    }
    syncfs(dfd); /* the rename below publishes the tree: make its contents durable first */
    fchmod(dfd, 0755);
    close(dfd);
    if (rename(tmpl, final) != 0) {
        int e = errno;
        rmtree(tmpl);
        if (e != EEXIST && e != ENOTEMPTY) return -1;
        /* another first run won the race: use its tree */
    }
    prune_stale_tmp(frozen);
    return 0;
}

static void exec_tree(const char *dir, char **argv) {
    char exe[PATH_MAX];
    if (join(exe, sizeof exe, dir, "kb")) return;
    argv[0] = exe; /* the onedir program finds its _internal/ next to argv[0] / /proc/self/exe */
    execv(exe, argv);
}

static int open_self(const char *argv0) {
    int fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) return fd;
    /* no /proc: argv[0] with a slash, else the first match on PATH */
    if (strchr(argv0, '/')) return open(argv0, O_RDONLY | O_CLOEXEC);
    const char *path = getenv("PATH");
    char cand[PATH_MAX];
    for (const char *p = path ? path : "/usr/local/bin:/usr/bin:/bin"; p && *p;) {
        const char *e = strchr(p, ':');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if (n > 0 && snprintf(cand, sizeof cand, "%.*s/%s", (int)n, p, argv0) < (int)sizeof cand && access(cand, X_OK) == 0)
            return open(cand, O_RDONLY | O_CLOEXEC);
        p = e ? e + 1 : NULL;
    }
    return -1;
}

int main(int argc, char **argv) {
    (void)argc;
    int self = open_self(argv[0] ? argv[0] : "kb");
    struct trailer t;
    if (self < 0 || read_trailer(self, &t) != 0) {
        warnf("cannot read the program's payload (is this the single-file kb built by packaging/build.sh?)");
        return 127;
    }
    if (t.codec != CODEC_CHAR) {
        warnf("payload codec '%c' not supported by this launcher", t.codec);
        return 127;
    }

    char roots[4][PATH_MAX];
    int shared[4] = {0};
    int n = 0;
    const char *v;
    if ((v = getenv("KB_FROZEN_CACHE")) && *v == '/' && strlen(v) < PATH_MAX) strcpy(roots[n++], v);
    if ((v = getenv("XDG_CACHE_HOME")) && *v == '/' && snprintf(roots[n], PATH_MAX, "%s/kb", v) < PATH_MAX) n++;
    if ((v = getenv("HOME")) && *v == '/' && snprintf(roots[n], PATH_MAX, "%s/.cache/kb", v) < PATH_MAX) n++;
    snprintf(roots[n], PATH_MAX, "/tmp/kb-%u", (unsigned)geteuid());
    shared[n++] = 1;

    int last_errno = 0;
    for (int i = 0; i < n; i++) {
        char dir[PATH_MAX], exe[PATH_MAX];
        if (snprintf(dir, sizeof dir, "%s/frozen/%s", roots[i], t.hash) >= (int)sizeof dir) continue;
        if (join(exe, sizeof exe, dir, "kb")) continue;
        if (shared[i] && !private_dir_ok(roots[i])) {
            warnf("not using %s: not a private directory of this user", roots[i]);
            continue;
        }
        if (access(exe, X_OK) != 0) {
            if (access(dir, F_OK) == 0) {
                /* a tree without its program (deleted by hand?): move it aside, unpack again */
                char aside[PATH_MAX];
                if (snprintf(aside, sizeof aside, "%s/frozen/.tmp-broken-%s-%ld", roots[i], t.hash, (long)getpid()) < (int)sizeof aside &&
                    rename(dir, aside) == 0)
                    rmtree(aside);
            }
            if (install(self, &t, roots[i], dir) != 0) {
                last_errno = errno;
                continue;
            }
        }
        exec_tree(dir, argv);
        last_errno = errno; /* exec refused (noexec mount?): try the next root */
        if (last_errno == ENOEXEC || last_errno == ENOENT) {
            char aside[PATH_MAX];
            if (snprintf(aside, sizeof aside, "%s/frozen/.tmp-broken-%s-%ld", roots[i], t.hash, (long)getpid()) < (int)sizeof aside &&
                rename(dir, aside) == 0)
                rmtree(aside);
            if (install(self, &t, roots[i], dir) == 0) {
                exec_tree(dir, argv);
                last_errno = errno;
            }
        }
    }
    warnf("cannot unpack or run the program in any cache directory (last error: %s); "
          "set KB_FROZEN_CACHE to a writable, executable directory",
          last_errno ? strerror(last_errno) : "unknown");
    return 127;
}
