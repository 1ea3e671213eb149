# tw's bare-metal start for the RV32IM machine: the stack at the top of RAM, main(), then the
# exit call (a7 = 93) with main's result in a0. RAM starts at address 0; the linker script
# (link.ld) puts this first, at the entry point.
    .section .text.start
    .globl _start
_start:
    la   sp, __stack_top
    call main
    li   a7, 93
    ecall
1:  j    1b
