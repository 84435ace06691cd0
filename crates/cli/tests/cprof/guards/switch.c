/* A jump table: a dense switch, each case taken a known number of times. */
static volatile int acc;

static void step(int k)
{
	switch (k) {
	case 0: acc += 1; break;
	case 1: acc += 3; break;
	case 2: acc += 5; break;
	case 3: acc += 7; break;
	case 4: acc += 11; break;
	case 5: acc += 13; break;
	case 6: acc -= 2; break;
	default: acc = 0; break;
	}
}

int main(void)
{
	for (int i = 0; i < 40; i++)
		step(i % 9);
	return 0;
}
