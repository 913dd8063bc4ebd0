/*
 * mpp/shmemx.h - the <mpp/shmemx.h> spelling of <shmemx.h> (deprecated since OpenSHMEM 1.1
 * but still part of the specification).  It only includes the real header.
 */
#ifndef GSAS_MPP_SHMEMX_H
#define GSAS_MPP_SHMEMX_H
#include "../shmemx.h"
#endif /* GSAS_MPP_SHMEMX_H */
