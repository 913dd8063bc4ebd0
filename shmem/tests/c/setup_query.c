/*
 * setup_query.c - library setup and query routines (OpenSHMEM 1.5 §9.1, §9.2):
 * shmem_init/finalize, my_pe/n_pes, info_get_version/name against the header constants,
 * query_thread, pe_accessible, addr_accessible, and shmem_ptr on the symmetric heap, on
 * globals (.data and .bss) and on function-scope statics: non-NULL for the own PE and for
 * every PE of the same node (usable for loads and stores), NULL for PEs of other nodes and
 * for addresses that are not symmetric.  Built both with the shared and with the static
 * library (-static-shmem), so globals are checked to be symmetric in both.
 */
#define CTEST_NAME "setup_query"
#include "ctest.h"

/* Globals: one initialised (.data), one zero (.bss). */
int global_data[4] = {11, 22, 33, 44};
long global_bss[8];

int main(void) {
    /* A function-scope static (symmetric too, OpenSHMEM 1.5 §3.2). */
    static int local_static[8];
    int stack_var = 5;

    shmem_init();
    ctest_begin();
    int me = shmem_my_pe(), npes = shmem_n_pes();
    CHECK(npes >= 1 && me >= 0 && me < npes, "my_pe %d, n_pes %d", me, npes);

    /* The data segment kept its initial contents through the library's remap. */
    CHECK(global_data[0] == 11 && global_data[3] == 44, "global_data lost its initial values");
    for (int i = 0; i < 8; i++)
        CHECK(global_bss[i] == 0 && local_static[i] == 0, "bss not zero at %d", i);

    int major = -1, minor = -1;
    shmem_info_get_version(&major, &minor);
    CHECK(major == SHMEM_MAJOR_VERSION && minor == SHMEM_MINOR_VERSION,
          "info_get_version %d.%d, header %d.%d", major, minor, SHMEM_MAJOR_VERSION,
          SHMEM_MINOR_VERSION);
    char name[SHMEM_MAX_NAME_LEN + 1];
    memset(name, 'x', sizeof name);
    shmem_info_get_name(name);
    CHECK(memchr(name, '\0', SHMEM_MAX_NAME_LEN) != NULL, "name not terminated within %d",
          SHMEM_MAX_NAME_LEN);
    CHECK(strcmp(name, SHMEM_VENDOR_STRING) == 0, "info_get_name \"%s\", header \"%s\"", name,
          SHMEM_VENDOR_STRING);

    int provided = -1;
    shmem_query_thread(&provided);
    CHECK(provided >= SHMEM_THREAD_SINGLE && provided <= SHMEM_THREAD_MULTIPLE,
          "query_thread after shmem_init gave %d", provided);

    for (int pe = 0; pe < npes; pe++)
        CHECK(shmem_pe_accessible(pe) == 1, "pe_accessible(%d) is not 1", pe);
    CHECK(shmem_pe_accessible(-1) == 0, "pe_accessible(-1) is not 0");
    CHECK(shmem_pe_accessible(npes) == 0, "pe_accessible(n_pes) is not 0");

    long *heap = (long *)shmem_malloc(8 * sizeof(long));
    CHECK(heap != NULL, "shmem_malloc returned NULL");
    for (int i = 0; i < 8; i++)
        heap[i] = 0;
    int *priv = (int *)malloc(sizeof(int));
    CHECK(priv != NULL, "malloc failed");

    for (int pe = 0; pe < npes; pe++) {
        CHECK(shmem_addr_accessible(heap, pe) == 1, "addr_accessible(heap, %d) is not 1", pe);
        CHECK(shmem_addr_accessible(&heap[7], pe) == 1, "addr_accessible(&heap[7], %d)", pe);
        CHECK(shmem_addr_accessible(global_data, pe) == 1, "addr_accessible(global_data, %d)",
              pe);
        CHECK(shmem_addr_accessible(&global_bss[3], pe) == 1,
              "addr_accessible(global_bss, %d)", pe);
        CHECK(shmem_addr_accessible(local_static, pe) == 1,
              "addr_accessible(function static, %d)", pe);
        CHECK(shmem_addr_accessible(&stack_var, pe) == 0, "a stack variable is accessible on %d",
              pe);
        CHECK(shmem_addr_accessible(priv, pe) == 0, "private malloc memory is accessible on %d",
              pe);
    }

    /* shmem_ptr: non-NULL exactly for the PEs of this node (the own PE at least). */
    int *nodes = ctest_node_of();
    int layout_known = 1;
    for (int pe = 0; pe < npes; pe++)
        layout_known &= nodes[pe] >= 0;
    int same_node_count = 0;
    for (int pe = 0; pe < npes; pe++) {
        int same = layout_known ? nodes[pe] == nodes[me] : pe == me;
        long *hp = (long *)shmem_ptr(heap, pe);
        int *gp = (int *)shmem_ptr(global_data, pe);
        long *bp = (long *)shmem_ptr(global_bss, pe);
        int *sp = (int *)shmem_ptr(local_static, pe);
        if (pe == me || (layout_known && same)) {
            CHECK(hp != NULL, "shmem_ptr(heap, %d) is NULL on the same node", pe);
            CHECK(gp != NULL, "shmem_ptr(global .data, %d) is NULL on the same node", pe);
            CHECK(bp != NULL, "shmem_ptr(global .bss, %d) is NULL on the same node", pe);
            CHECK(sp != NULL, "shmem_ptr(function static, %d) is NULL on the same node", pe);
            same_node_count++;
        } else if (layout_known) {
            CHECK(hp == NULL && gp == NULL && bp == NULL && sp == NULL,
                  "shmem_ptr(.., %d) is not NULL for a PE of another node (%d vs %d)", pe,
                  nodes[pe], nodes[me]);
        }
        if (pe == me) {
            /* The own PE's pointer reaches the object itself. */
            CHECK(*gp == 11 && gp[3] == 44, "shmem_ptr(global_data, me) reads %d", *gp);
        }
        CHECK(shmem_ptr(&stack_var, pe) == NULL, "shmem_ptr(stack variable, %d) is not NULL", pe);
    }
    CHECK(same_node_count >= 1, "no PE reachable through shmem_ptr");
    ctest_barrier();

    /* Stores through shmem_ptr (same node) or puts (other nodes) into the right neighbour's
     * heap, globals and static; every PE then finds its left neighbour's values. */
    int right = (me + 1) % npes, left = (me + npes - 1) % npes;
    long *hp = (long *)shmem_ptr(heap, right);
    long *bp = (long *)shmem_ptr(global_bss, right);
    int *sp = (int *)shmem_ptr(local_static, right);
    int *gp = (int *)shmem_ptr(global_data, right);
    if (hp != NULL && bp != NULL && sp != NULL && gp != NULL) {
        hp[1] = 1000 + me;
        bp[2] = 2000 + me;
        sp[3] = 3000 + me;
        gp[1] = 4000 + me;
    } else {
        shmem_long_p(&heap[1], 1000 + me, right);
        shmem_long_p(&global_bss[2], 2000 + me, right);
        shmem_int_p(&local_static[3], 3000 + me, right);
        shmem_int_p(&global_data[1], 4000 + me, right);
    }
    ctest_barrier();
    CHECK(heap[1] == 1000 + left, "heap[1] = %ld, expected %d", heap[1], 1000 + left);
    CHECK(global_bss[2] == 2000 + left, "global_bss[2] = %ld, expected %d", global_bss[2],
          2000 + left);
    CHECK(local_static[3] == 3000 + left, "local_static[3] = %d, expected %d", local_static[3],
          3000 + left);
    CHECK(global_data[1] == 4000 + left, "global_data[1] = %d, expected %d", global_data[1],
          4000 + left);
    /* And the same read back remotely. */
    CHECK(shmem_int_g(&global_data[1], right) == 4000 + me, "g(global_data) from %d", right);
    CHECK(shmem_long_g(&global_bss[2], right) == 2000 + me, "g(global_bss) from %d", right);
    CHECK(shmem_int_g(&local_static[3], right) == 3000 + me, "g(local_static) from %d", right);
    ctest_barrier();

    free(nodes);
    free(priv);
    shmem_free(heap);
    shmem_finalize();
    ctest_ok(me, npes);
    return 0;
}
