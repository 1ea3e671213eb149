/* The smallest end-to-end program: one line of output and an exit code. */
#include "tw_rt.h"

int main(void) {
    tw_puts("hi\n");
    return 7;
}
