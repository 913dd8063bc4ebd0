/*
 * mpp/shmem.h - the <mpp/shmem.h> spelling of <shmem.h> (deprecated since OpenSHMEM 1.1 but
 * still part of the specification).  It only includes the real header, so both spellings can
 * be mixed in one program.
 */
#ifndef GSAS_MPP_SHMEM_H
#define GSAS_MPP_SHMEM_H
#include "../shmem.h"
#endif /* GSAS_MPP_SHMEM_H */
