/*
 * JSON string literals for reports (the command's --json, the benchmark harness's JSON lines).
 */
#include "spotwave/io.h"

#include <stdio.h>

/* Length of the valid UTF-8 sequence at s (2..4), or 0 when the bytes there are not valid UTF-8:
 * no overlong forms, no surrogates (U+D800..U+DFFF), nothing beyond U+10FFFF, no truncated
 * sequence (the terminating '\0' is not a continuation byte, so reading stops at it). */
static int utf8_length(const unsigned char *s)
{
    unsigned char c = s[0];
    unsigned char lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    int n;
    if (c >= 0xC2 && c <= 0xDF) {
        n = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        n = 3;
        if (c == 0xE0)
            lo = 0xA0; /* overlong */
        if (c == 0xED)
            hi = 0x9F; /* surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4;
        if (c == 0xF0)
            lo = 0x90; /* overlong */
        if (c == 0xF4)
            hi = 0x8F; /* beyond U+10FFFF */
    } else {
        return 0;
    }
    if (s[1] < lo || s[1] > hi)
        return 0;
    for (int i = 2; i < n; i++)
        if (s[i] < 0x80 || s[i] > 0xBF)
            return 0;
    return n;
}

void sw_json_write_string(FILE *out, const char *s)
{
    if (!s) {
        fputs("null", out);
        return;
    }
    const unsigned char *p = (const unsigned char *)s;
    fputc('"', out);
    while (*p) {
        unsigned char c = *p;
        if (c == '"' || c == '\\') {
            fputc('\\', out);
            fputc(c, out);
            p++;
        } else if (c < 0x20) {
            switch (c) {
            case '\n': fputs("\\n", out); break;
            case '\r': fputs("\\r", out); break;
            case '\t': fputs("\\t", out); break;
            default: fprintf(out, "\\u%04x", c); break;
            }
            p++;
        } else if (c < 0x80) {
            fputc(c, out);
            p++;
        } else {
            int n = utf8_length(p);
            if (n == 0) {
                fputs("\\ufffd", out); /* one replacement per invalid byte */
                p++;
            } else {
                fwrite(p, 1, (size_t)n, out);
                p += n;
            }
        }
    }
    fputc('"', out);
}
