/* The NCCL engine (cuda_nccl.c), offered by the cuda module beside the
 * backend when it was built with NCCL (cuda_module.c). */
#ifndef GPTX_CUDA_NCCL_H
#define GPTX_CUDA_NCCL_H

#include "comm_engine.h"

/* GPTX_ERR_UNSUPPORTED unless the context is a CUDA context with a device. */
int gptx_comm_nccl_check_context(const comm_setup *s);
/* A fresh ncclUniqueId (rank 0 makes it, every rank receives it). */
int gptx_comm_nccl_unique_id(unsigned char id[COMM_NCCL_ID_BYTES]);
int gptx_comm_nccl_create(comm_engine **out, const comm_setup *s,
                          const unsigned char id[COMM_NCCL_ID_BYTES]);

#endif
