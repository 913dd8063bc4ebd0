/*
 * shmemx.h - gsas extensions to OpenSHMEM 1.5.
 *
 * What it is
 *   The header the specification reserves for implementation extensions.  It includes
 *   <shmem.h> and adds the gsas version constants below.
 *
 * What it is not
 *   It declares no shmemx_ routines yet; every gsas routine is a specification routine.
 *   Names defined here use the GSAS_ prefix (constants) or shmemx_ (routines).
 *
 * Thread safety
 *   A header has no state.
 */
#ifndef GSAS_SHMEMX_H
#define GSAS_SHMEMX_H

#include "shmem.h"

/** Version of the gsas library these headers belong to (the Cargo workspace version;
 *  shmem/tests/c/headers/check.sh keeps them equal). */
#define GSAS_VERSION_MAJOR 0
#define GSAS_VERSION_MINOR 1
#define GSAS_VERSION_PATCH 0

#endif /* GSAS_SHMEMX_H */
