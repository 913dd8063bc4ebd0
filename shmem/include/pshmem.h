/*
 * pshmem.h - the OpenSHMEM 1.5 profiling interface of gsas.
 *
 * What it is
 *   The `pshmem_` name of every OpenSHMEM 1.5 routine (1610 prototypes) and of the routines
 *   <shmem.h> declares besides (pshmem_team_ptr and the ibput/ibget routines of 1.6, the
 *   deprecated cache routines), for tools that
 *   interpose on the `shmem_` names and forward to the library.  Names without the shmem_
 *   prefix get a `p` in front of the whole name: pstart_pes, p_my_pe, p_num_pes, pshmalloc,
 *   pshfree, pshrealloc, pshmemalign.  The prototypes are generated from the same type tables
 *   as <shmem.h> (GSAS_SHMEM_DECLARE_ALL with the prefix `pshmem_`), so the two cannot drift.
 *
 * What it is not
 *   There are no type-generic pshmem_ interfaces: the specification defines none.  The
 *   deprecated pshmem_wait_until (long) and pshmem_sync (active set) are declared in every
 *   language mode, like their shmem_ counterparts.
 *
 * Thread safety
 *   A header has no state; the pshmem_ routines behave exactly like their shmem_ twins.
 */
#ifndef GSAS_PSHMEM_H
#define GSAS_PSHMEM_H

#include "shmem.h"

#ifdef __cplusplus
extern "C" {
#endif

GSAS_SHMEM_DECLARE_ALL(pshmem_)

#ifdef __cplusplus
}
#endif

#endif /* GSAS_PSHMEM_H */
