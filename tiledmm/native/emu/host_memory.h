/* host_memory.h: how much host memory this process can really get.
 *
 * Physical RAM is not the answer in a container or a JupyterHub pod: there a cgroup limits the
 * process to less, and a request above that limit ends with the OOM killer, not with an
 * allocation failure. Two numbers are computed here:
 *
 *   the limit      what the process can ever have: the smallest of physical memory, the
 *                  lowest cgroup memory limit on the path from its cgroup to the root (cgroup
 *                  v2 memory.max; cgroup v1 memory.limit_in_bytes; both are read, for hybrid
 *                  hierarchies), and TILEDMM_HOST_MEMORY_LIMIT when set. Read once per
 *                  process (it does not change in practice). A request above it can never
 *                  succeed: tiledmm raises MemoryError.
 *   available      what it can get now without the OOM killer: the smallest of MemAvailable
 *                  (/proc/meminfo: free memory plus page cache the kernel can reclaim), for
 *                  each limited cgroup on the path its limit less its usage not counting
 *                  inactive file cache (cgroup v2 memory.current less memory.stat's
 *                  inactive_file; v1 memory.usage_in_bytes less total_inactive_file), and the
 *                  limit. Read fresh at each call that asks (a few small file reads), since
 *                  other processes change it; callers ask only for large requests. Cache the
 *                  kernel would reclaim counts as available, so a request that succeeds by
 *                  dropping cache is not refused. Swap is not counted: a notebook that swaps
 *                  its arrays is as stuck as one that was killed.
 *
 * TILEDMM_HOST_MEMORY_LIMIT (bytes, or with a K, M, G or T suffix in powers of 1024, e.g.
 * "2G") lowers the limit for users who want tiledmm to refuse earlier than the machine would,
 * and for tests; it can only lower the limit, never raise it. An unparsable value is ignored.
 *
 * Header-only, in C11 and C++17: the C glue (arrays.c, staging.c) and the emulator's runtime
 * (runtime.cpp, which tm.compile also builds into each user kernel from the shipped headers)
 * share this one implementation. Every reader takes a root folder ("" for the real system) so
 * that tests can point it at a fake /proc and /sys/fs/cgroup. */
#ifndef TM_HOST_MEMORY_H
#define TM_HOST_MEMORY_H

#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Values at or above this are "no limit" (cgroup v1 writes 2^63 less a page for unlimited). */
#define TM_HM_UNLIMITED (1ULL << 62)
#define TM_HM_PATH 1024

typedef struct {
    unsigned long long limit;         /* the smallest of the known values below; 0: none known */
    unsigned long long physical;      /* MemTotal; 0 when unreadable */
    unsigned long long cgroup;        /* the lowest cgroup limit on the path; 0: none */
    unsigned long long override_bytes;/* TILEDMM_HOST_MEMORY_LIMIT; 0: not set */
    char cgroup_file[TM_HM_PATH];     /* the file the cgroup limit was read from */
    char source[TM_HM_PATH + 64];     /* what the limit is, for messages */
} tm_host_memory_limits;

/* ---- small readers (each returns 0 on success, -1 when the file or value is missing) ---- */

static inline int tm_hm_join(char *out, size_t n, const char *a, const char *b, const char *c)
{
    const int len = snprintf(out, n, "%s%s%s", a, b, c);
    return len < 0 || (size_t)len >= n ? -1 : 0;
}

/* A file's first n-1 bytes as a string. */
static inline int tm_hm_read(const char *path, char *buf, size_t n)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) return -1;
    const size_t got = fread(buf, 1, n - 1, f);
    const int failed = ferror(f);
    if (fclose(f) != 0 || failed) return -1;
    buf[got] = '\0';
    return 0;
}

/* A cgroup value file: a number of bytes, or "max" (TM_HM_UNLIMITED). */
static inline int tm_hm_read_bytes(const char *path, unsigned long long *out)
{
    char buf[64], *end;
    if (tm_hm_read(path, buf, sizeof buf) < 0) return -1;
    if (strncmp(buf, "max", 3) == 0) {
        *out = TM_HM_UNLIMITED;
        return 0;
    }
    if (buf[0] < '0' || buf[0] > '9') return -1;
    const unsigned long long v = strtoull(buf, &end, 10);
    if (end == buf || (*end != '\0' && *end != '\n')) return -1;
    *out = v >= TM_HM_UNLIMITED ? TM_HM_UNLIMITED : v;
    return 0;
}

/* The number after `key` at the start of a line of a "key value" or "Key: value kB" file,
 * times `unit`. */
static inline int tm_hm_read_key(const char *path, const char *key, unsigned long long unit,
                                 unsigned long long *out)
{
    char line[256];
    const size_t klen = strlen(key);
    int found = -1;
    FILE *f = fopen(path, "r");
    if (f == NULL) return -1;
    while (found < 0 && fgets(line, sizeof line, f) != NULL) {
        if (strncmp(line, key, klen) != 0 ||
            (line[klen] != ' ' && line[klen] != ':' && line[klen] != '\t'))
            continue;
        char *p = line + klen, *end;
        while (*p == ':' || *p == ' ' || *p == '\t')
            ++p;
        const unsigned long long v = strtoull(p, &end, 10);
        if (end != p && !__builtin_mul_overflow(v, unit, out)) found = 0;
    }
    if (fclose(f) != 0) return -1;
    return found;
}

/* "2G", "512M", "1048576": bytes; -1 for anything else (or 0). */
static inline int tm_hm_parse_size(const char *s, unsigned long long *out)
{
    char *end;
    if (s == NULL || *s < '0' || *s > '9') return -1;
    unsigned long long v = strtoull(s, &end, 10), unit = 1;
    switch (*end) {
    case 'k':
    case 'K':
        unit = 1ULL << 10;
        ++end;
        break;
    case 'm':
    case 'M':
        unit = 1ULL << 20;
        ++end;
        break;
    case 'g':
    case 'G':
        unit = 1ULL << 30;
        ++end;
        break;
    case 't':
    case 'T':
        unit = 1ULL << 40;
        ++end;
        break;
    default: break;
    }
    if (unit > 1 && *end == 'i') ++end;
    if (*end == 'B' || *end == 'b') ++end;
    if (*end != '\0' || v == 0 || __builtin_mul_overflow(v, unit, out)) return -1;
    return 0;
}

/* ---- cgroups ---- */

/* The cgroup path of this process for one hierarchy from <root>/proc/self/cgroup: v2's line
 * "0::/path" (v1 == 0) or the v1 line whose controller list holds "memory". "/" when the file
 * or the line is missing (a container's own cgroup is then its root). */
static inline void tm_hm_cgroup_path(const char *root, int v1, char *out, size_t n)
{
    char path[TM_HM_PATH], line[TM_HM_PATH];
    snprintf(out, n, "/");
    if (tm_hm_join(path, sizeof path, root, "/proc/self/cgroup", "") < 0) return;
    FILE *f = fopen(path, "r");
    if (f == NULL) return;
    while (fgets(line, sizeof line, f) != NULL) {
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (c2 == NULL) continue;
        *c2 = '\0';
        line[strcspn(line, ":")] = '\0';
        const char *controllers = c1 + 1, *rel = c2 + 1;
        int match = 0;
        if (!v1) {
            match = strcmp(line, "0") == 0 && *controllers == '\0';
        } else {
            for (const char *t = controllers; *t && !match;) {
                const size_t len = strcspn(t, ",");
                match = len == 6 && strncmp(t, "memory", 6) == 0;
                t += len + (t[len] == ',');
            }
        }
        if (match) {
            const size_t len = strcspn(rel, "\n");
            if (len > 0 && len < n) {
                memcpy(out, rel, len);
                out[len] = '\0';
            }
            break;
        }
    }
    (void)fclose(f); /* read-only: nothing to lose */
}

/* Walk from the process's cgroup up to the hierarchy's root folder `mount` and take, over the
 * levels that have a limit, the lowest limit (into *limit, 0 meaning none yet, with its file)
 * and, when headroom is not NULL, the lowest limit less unreclaimable usage (*headroom starts
 * at ULLONG_MAX). Values stay as they were where no level has a limit. */
static inline void tm_hm_cgroup_walk(const char *root, const char *mount, int v1,
                                     unsigned long long *limit, char *limit_file, size_t n,
                                     unsigned long long *headroom)
{
    const char *limit_name = v1 ? "memory.limit_in_bytes" : "memory.max";
    const char *usage_name = v1 ? "memory.usage_in_bytes" : "memory.current";
    const char *inactive_key = v1 ? "total_inactive_file" : "inactive_file";
    char base[TM_HM_PATH], dir[TM_HM_PATH], rel[TM_HM_PATH], file[TM_HM_PATH];

    if (tm_hm_join(base, sizeof base, root, mount, "") < 0 || access(base, F_OK) != 0) return;
    if (!v1) { /* a v2 hierarchy has cgroup.controllers at its root; a v1 tmpfs has not */
        if (tm_hm_join(file, sizeof file, base, "/cgroup.controllers", "") < 0 ||
            access(file, F_OK) != 0)
            return;
    }
    tm_hm_cgroup_path(root, v1, rel, sizeof rel);
    /* Outside a cgroup namespace the path may name a folder this mount does not show (a
     * container that sees the host's path): the mount's root is then the process's cgroup. */
    if (tm_hm_join(dir, sizeof dir, base, strcmp(rel, "/") == 0 ? "" : rel, "") < 0 ||
        access(dir, F_OK) != 0)
        snprintf(dir, sizeof dir, "%s", base);
    const size_t base_len = strlen(base);
    for (;;) {
        unsigned long long lim, usage, inactive = 0;
        if (tm_hm_join(file, sizeof file, dir, "/", limit_name) == 0 &&
            tm_hm_read_bytes(file, &lim) == 0 && lim < TM_HM_UNLIMITED) {
            if (*limit == 0 || lim < *limit) {
                *limit = lim;
                snprintf(limit_file, n, "%s", file);
            }
            if (headroom != NULL && tm_hm_join(file, sizeof file, dir, "/", usage_name) == 0 &&
                tm_hm_read_bytes(file, &usage) == 0) {
                if (tm_hm_join(file, sizeof file, dir, "/", "memory.stat") == 0 &&
                    tm_hm_read_key(file, inactive_key, 1, &inactive) < 0)
                    inactive = 0;
                const unsigned long long used = usage > inactive ? usage - inactive : 0;
                const unsigned long long room = lim > used ? lim - used : 0;
                if (room < *headroom) *headroom = room;
            }
        }
        if (strlen(dir) <= base_len) break;
        char *slash = strrchr(dir, '/');
        if (slash == NULL || (size_t)(slash - dir) < base_len) break;
        *slash = '\0';
    }
}

/* Both hierarchies: v2 at /sys/fs/cgroup (or /sys/fs/cgroup/unified on a hybrid system),
 * v1's memory controller at /sys/fs/cgroup/memory. */
static inline void tm_hm_cgroups(const char *root, unsigned long long *limit, char *limit_file,
                                 size_t n, unsigned long long *headroom)
{
    tm_hm_cgroup_walk(root, "/sys/fs/cgroup", 0, limit, limit_file, n, headroom);
    tm_hm_cgroup_walk(root, "/sys/fs/cgroup/unified", 0, limit, limit_file, n, headroom);
    tm_hm_cgroup_walk(root, "/sys/fs/cgroup/memory", 1, limit, limit_file, n, headroom);
}

/* ---- the two numbers ---- */

/* The limit, read under `root` ("": the real system); `override_value` is
 * TILEDMM_HOST_MEMORY_LIMIT's value or NULL. */
static inline void tm_host_memory_read_limits(const char *root, const char *override_value,
                                              tm_host_memory_limits *out)
{
    char path[TM_HM_PATH];
    memset(out, 0, sizeof *out);
    if (tm_hm_join(path, sizeof path, root, "/proc/meminfo", "") < 0 ||
        tm_hm_read_key(path, "MemTotal", 1024, &out->physical) < 0) {
        const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
        out->physical = *root == '\0' && pages > 0 && page > 0
                            ? (unsigned long long)pages * (unsigned long long)page
                            : 0;
    }
    tm_hm_cgroups(root, &out->cgroup, out->cgroup_file, sizeof out->cgroup_file, NULL);
    if (tm_hm_parse_size(override_value, &out->override_bytes) < 0) out->override_bytes = 0;

    out->limit = out->physical;
    snprintf(out->source, sizeof out->source, "physical memory");
    if (out->cgroup && (out->limit == 0 || out->cgroup < out->limit)) {
        out->limit = out->cgroup;
        snprintf(out->source, sizeof out->source, "the cgroup memory limit in %s",
                 out->cgroup_file);
    }
    if (out->override_bytes && (out->limit == 0 || out->override_bytes < out->limit)) {
        out->limit = out->override_bytes;
        snprintf(out->source, sizeof out->source, "TILEDMM_HOST_MEMORY_LIMIT");
    }
}

/* What the process can get now (see the top of this file), never above lim->limit;
 * ULLONG_MAX when nothing is known. `why` (may be NULL) says which number was the smallest. */
static inline unsigned long long tm_host_memory_available_at(const char *root,
                                                             const tm_host_memory_limits *lim,
                                                             char *why, size_t n)
{
    char path[TM_HM_PATH], file[TM_HM_PATH];
    unsigned long long avail = lim->limit ? lim->limit : ULLONG_MAX, meminfo = 0, cgroup = 0,
                       headroom = ULLONG_MAX;
    if (why) snprintf(why, n, "%s", lim->limit ? lim->source : "nothing known");
    if (tm_hm_join(path, sizeof path, root, "/proc/meminfo", "") == 0 &&
        tm_hm_read_key(path, "MemAvailable", 1024, &meminfo) == 0 && meminfo < avail) {
        avail = meminfo;
        if (why) snprintf(why, n, "MemAvailable in /proc/meminfo");
    }
    tm_hm_cgroups(root, &cgroup, file, sizeof file, &headroom);
    if (cgroup && headroom < avail) {
        avail = headroom;
        if (why)
            snprintf(why, n,
                     "the cgroup memory limit in %s less the memory in use (file "
                     "cache the kernel can reclaim not counted)",
                     file);
    }
    return avail;
}

/* ---- the real system's, read once per process (per copy of this header's code) ---- */

static tm_host_memory_limits tm_hm_process_limits;
static pthread_once_t tm_hm_process_once = PTHREAD_ONCE_INIT;

static void tm_hm_process_init(void)
{
    tm_host_memory_read_limits("", getenv("TILEDMM_HOST_MEMORY_LIMIT"), &tm_hm_process_limits);
}

/* This process's limit; NULL in the (never seen) case that pthread_once fails. */
static inline const tm_host_memory_limits *tm_host_memory_limits_get(void)
{
    return pthread_once(&tm_hm_process_once, tm_hm_process_init) == 0 ? &tm_hm_process_limits
                                                                      : NULL;
}

/* What this process can get now; ULLONG_MAX when nothing is known. */
static inline unsigned long long tm_host_memory_available(char *why, size_t n)
{
    const tm_host_memory_limits *lim = tm_host_memory_limits_get();
    if (lim == NULL) return ULLONG_MAX;
    return tm_host_memory_available_at("", lim, why, n);
}

#endif /* TM_HOST_MEMORY_H */
