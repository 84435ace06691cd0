// mprof_e2e's C++ vector: at -O0 the allocation is made in the standard
// library's headers (bits/new_allocator.h), instantiated in this program;
// the listing charges it to the user's line below.
#include <vector>

static std::vector<int> *kept;

int main()
{
    kept = new std::vector<int>(25000); /* line 10: 24 + 100,000 bytes, kept */
    std::vector<int> tmp(100);          /* line 11: 400 bytes, freed */
    return tmp[0] + (*kept)[0];
}
