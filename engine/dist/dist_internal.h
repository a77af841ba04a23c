/* dist_internal.h — what the files of engine/dist share (MPI builds only). */
#ifndef VENOM_DIST_INTERNAL_H
#define VENOM_DIST_INTERNAL_H

#include "internal.h"

#include <mpi.h>

/* An MPI return code other than MPI_SUCCESS as VN_ERR_STATE, with MPI's
 * text: "op: MPI failed: <message>". */
vn_status vn__mpi_err(int rc, const char *op);
/* VN_ERR_STATE unless vn_dist_init has run. */
vn_status vn__dist_ready(const char *op);

#endif
