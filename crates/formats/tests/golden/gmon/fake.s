	.text
	.globl _start
	.type _start,@function
_start:	ret
	.org 0x1a6
	.globl leaf
	.type leaf,@function
leaf:	ret
	.org 0x1da
	.globl mid
	.type mid,@function
mid:	ret
	.org 0x201
	.globl main
	.type main,@function
main:	ret
	.org 0x300
