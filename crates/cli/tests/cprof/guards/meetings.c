// Where a fork's ways meet again (hit mode's meetings): joins reached
// from their fork alone (if/else, if without else, nested), and one also
// reached by a goto from code that skips the fork, where only the goto
// ever runs: that join ran though its fork did not.
static volatile int sink;
static volatile int two = 2;

__attribute__((noinline)) static int bump(int a)
{
	return a + sink;
}

__attribute__((noinline)) static int skipped(int a, int mode)
{
	int r = a;
	if (mode == 2) {
		r = bump(r); // a call: this way is no part of a region
		goto join;
	}
	if (a > 3)
		r = a * 2;
	else
		r = a - 1;
join:
	r += 7;
	return r;
}

__attribute__((noinline)) static int nested(int a, int b)
{
	int r = 0;
	if (a > b) {
		if (a > 2 * b)
			r = 1;
		else
			r = 2;
	} else {
		r = 3;
	}
	r += a;
	if (b & 1)
		r ^= 5;
	return r;
}

int main(int argc, char **argv)
{
	(void)argv;
	for (int i = 0; i < 5; i++) {
		sink += skipped(i, two);
		sink += nested(i + argc, 2);
	}
	return 0;
}
