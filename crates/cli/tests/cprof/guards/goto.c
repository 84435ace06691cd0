/* Computed gotos: a tiny bytecode interpreter dispatching through a
 * table of label addresses (GNU C). */
int main(void)
{
	static const unsigned char code[] = { 0, 1, 1, 2, 0, 1, 3, 0, 2, 4 };
	static void *ops[] = { &&inc, &&dbl, &&dec, &&neg, &&end };
	volatile long v = 1;
	int pc = 0;
	goto *ops[code[pc++]];
inc:
	v++;
	goto *ops[code[pc++]];
dbl:
	v *= 2;
	goto *ops[code[pc++]];
dec:
	v--;
	goto *ops[code[pc++]];
neg:
	v = -v;
	goto *ops[code[pc++]];
end:
	return v == -16 ? 0 : 1;
}
