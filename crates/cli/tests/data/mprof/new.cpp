// mprof's C++ test: operator new charged to the user's lines.
#include <cstdio>
struct Node {
    char payload[48];
    Node *next;
};
int main()
{
    int *array = new int[250]; // line 9: 1000 bytes, kept
    Node *head = nullptr;
    for (int i = 0; i < 10; i++) {
        Node *n = new Node; // line 12: 10 x 56 bytes
        n->next = head;
        head = n;
    }
    while (head) {
        Node *n = head->next;
        delete head;
        head = n;
    }
    std::printf("%d\n", array[0] = 1);
    return 0;
}
