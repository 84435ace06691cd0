// C++ exceptions across frames: thrown three frames below the catch,
// four times; the frames between are left by the unwinder.
#include <stdexcept>

static volatile int sum;

static void thrower(int i)
{
	if (i % 2 == 0)
		throw std::runtime_error("even");
	sum += i;
}

static void middle(int i)
{
	thrower(i);
	sum += 2;
}

static void outer(int i)
{
	middle(i);
	sum += 3;
}

int main()
{
	int caught = 0;
	for (int i = 0; i < 8; i++) {
		try {
			outer(i);
		} catch (const std::exception &) {
			caught++;
		}
	}
	return caught == 4 ? 0 : 1;
}
