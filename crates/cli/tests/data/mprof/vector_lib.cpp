// mprof_e2e's library of vectors (built -shared at -O0): its allocation
// is made in bits/new_allocator.h, instantiated here; with -m naming this
// library by path, its own line below is charged.
#include <vector>

std::vector<int> *make_vector()
{
    return new std::vector<int>(5000); /* line 8: 24 + 20,000 bytes */
}
