#include "tw_rt.h"

long tw_write(const void *buf, size_t len) {
    register long a0 __asm__("a0") = 1;
    register long a1 __asm__("a1") = (long)buf;
    register long a2 __asm__("a2") = (long)len;
    register long a7 __asm__("a7") = 64;
    __asm__ volatile("ecall" : "+r"(a0) : "r"(a1), "r"(a2), "r"(a7) : "memory");
    return a0;
}

void tw_puts(const char *s) {
    size_t n = 0;
    while (s[n]) n++;
    tw_write(s, n);
}

void tw_putu(u32 v) {
    char buf[10];
    int i = 10;
    do { buf[--i] = (char)('0' + v % 10); v /= 10; } while (v);
    tw_write(buf + i, (size_t)(10 - i));
}

void tw_puti(i32 v) {
    if (v < 0) { tw_write("-", 1); tw_putu((u32)0 - (u32)v); }
    else tw_putu((u32)v);
}

void tw_puthex(u32 v) {
    char buf[8];
    for (int i = 7; i >= 0; i--) { buf[i] = "0123456789abcdef"[v & 15]; v >>= 4; }
    tw_write(buf, 8);
}

void *memset(void *d, int c, size_t n) {
    u8 *p = d;
    while (n--) *p++ = (u8)c;
    return d;
}

void *memcpy(void *d, const void *s, size_t n) {
    u8 *p = d;
    const u8 *q = s;
    while (n--) *p++ = *q++;
    return d;
}
