/* Iterative and recursive Fibonacci numbers (recursion exercises the stack). */
#include "tw_rt.h"

static u32 fib_rec(u32 n) { return n < 2 ? n : fib_rec(n - 1) + fib_rec(n - 2); }

int main(void) {
    u32 a = 0, b = 1;
    for (int i = 0; i < 20; i++) { u32 t = a + b; a = b; b = t; }
    tw_puts("fib(20)="); tw_putu(a); tw_puts("\n");
    tw_puts("rec(10)="); tw_putu(fib_rec(10)); tw_puts("\n");
    return (int)(a & 255);
}
