/* A variant file's kernel line and opening comment (variant_source.h). */
#include "lab/report/variant_source.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

int kl_variant_source_read(const char *path, char *comment, size_t len)
{
    FILE *f = fopen(path, "r");
    comment[0] = 0;
    if (!f) return 0;
    char line[1024];
    int lineno = 0, kernel_line = 0;
    bool in_comment = false, first_done = false;
    size_t off = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        if (!first_done) {
            char *s = line;
            if (!in_comment && strncmp(s, "/*", 2) == 0) in_comment = true, s += 2;
            if (in_comment) {
                char *end = strstr(s, "*/");
                if (end) *end = 0, in_comment = false, first_done = true;
                while (*s == ' ') s++;
                if (*s == '*' && s[1] != '/') s++;
                if (*s == ' ') s++;
                off += (size_t)snprintf(comment + off, off < len ? len - off : 0, "%s", s);
                if (first_done && off < len && (off == 0 || comment[off - 1] != '\n'))
                    off += (size_t)snprintf(comment + off, len - off, "\n");
            } else {
                first_done = true;
            }
        }
        if (!kernel_line && strstr(line, "__global__")) kernel_line = lineno;
    }
    fclose(f);
    while (off > 0 && off <= len && (comment[off - 1] == '\n' || comment[off - 1] == ' ')) comment[--off] = 0;
    return kernel_line;
}
