#include "files.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *kind(mode_t m)
{
    if (S_ISDIR(m)) return "a directory";
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISCHR(m) || S_ISBLK(m)) return "a device";
    if (S_ISSOCK(m)) return "a socket";
    return "not a regular file";
}

FILE *kl_open_regular(const char *path, long long max_bytes, long long *size, struct kl_err *err)
{
    /* O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer. It has no
     * effect on the regular files we go on to read. */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return kl_fail(err, "%s: cannot open: %s", path, strerror(errno)), NULL;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        kl_fail(err, "%s: cannot stat: %s", path, strerror(errno));
        close(fd);
        return NULL;
    }
    if (!S_ISREG(st.st_mode)) {
        kl_fail(err, "%s: is %s, not a regular file", path, kind(st.st_mode));
        close(fd);
        return NULL;
    }
    if ((long long)st.st_size > max_bytes) {
        kl_fail(err, "%s: %lld bytes, more than the %lld this input may have", path, (long long)st.st_size,
                max_bytes);
        close(fd);
        return NULL;
    }
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        kl_fail(err, "%s: cannot open: %s", path, strerror(errno));
        close(fd);
        return NULL;
    }
    if (size) *size = (long long)st.st_size;
    return f;
}

char *kl_read_regular(const char *path, long long max_bytes, size_t *len, struct kl_err *err)
{
    long long size;
    FILE *f = kl_open_regular(path, max_bytes, &size, err);
    if (!f) return NULL;
    char *s = malloc((size_t)size + 1);
    if (!s) {
        fclose(f);
        return kl_fail(err, "%s: cannot allocate %lld bytes to read it", path, size), NULL;
    }
    size_t got = fread(s, 1, (size_t)size, f);
    bool bad = ferror(f) != 0;
    fclose(f);
    if (bad) {
        free(s);
        return kl_fail(err, "%s: read error", path), NULL;
    }
    s[got] = 0;
    if (len) *len = got;
    return s;
}
