/* mprof_e2e: calls vector_lib.cpp's make_vector (the allocation is the
 * library's), and keeps the vector. */
void *make_vector(void) __asm__("_Z11make_vectorv");

int main(void)
{
    return make_vector() ? 0 : 1;
}
