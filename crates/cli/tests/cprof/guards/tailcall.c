/* Tail calls into other functions (built -O2: sibling calls become
 * jumps), so a callee returns straight to its caller's caller. */
__attribute__((noinline)) static int leaf(int x)
{
	return x * 3 + 1;
}

__attribute__((noinline)) static int hop(int x)
{
	if (x & 1)
		return leaf(x + 1);
	return leaf(x - 1);
}

__attribute__((noinline)) static int start(int x)
{
	return hop(x + 2);
}

int main(void)
{
	int s = 0;
	for (volatile int i = 0; i < 9; i++)
		s += start(i);
	return s > 0 ? 0 : 1;
}
