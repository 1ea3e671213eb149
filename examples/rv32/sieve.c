/* Sieve of Eratosthenes below 400; prints the count and the last prime. */
#include "tw_rt.h"

#define LIMIT 400
static u8 composite[LIMIT];

int main(void) {
    int count = 0, last = 0;
    for (int i = 2; i < LIMIT; i++) {
        if (composite[i]) continue;
        count++; last = i;
        for (int j = i * i; j < LIMIT; j += i) composite[j] = 1;
    }
    tw_puts("primes "); tw_putu((u32)count); tw_puts(" last "); tw_putu((u32)last); tw_puts("\n");
    return count;
}
