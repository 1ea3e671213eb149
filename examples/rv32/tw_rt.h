/* tw's bare-metal runtime for the RV32IM machine: console output through the write call
   (a7 = 64, a0 = 1), exit through crt0.S, and the few functions gcc may call on its own. */
#ifndef TW_RT_H
#define TW_RT_H
typedef unsigned int u32;
typedef int i32;
typedef unsigned char u8;
typedef unsigned int size_t;

long tw_write(const void *buf, size_t len);
void tw_puts(const char *s);          /* s, no newline added */
void tw_putu(u32 v);                  /* decimal */
void tw_puti(i32 v);
void tw_puthex(u32 v);                /* 8 hex digits */
void *memset(void *d, int c, size_t n);
void *memcpy(void *d, const void *s, size_t n);
#endif
