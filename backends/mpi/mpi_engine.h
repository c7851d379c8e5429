/* The MPI engine (mpi_engine.c), offered by the MPI module (mpi_module.c). */
#ifndef GPTX_MPI_ENGINE_H
#define GPTX_MPI_ENGINE_H

#include "comm_engine.h"

/* Initializes MPI if needed and duplicates MPI_COMM_WORLD (errors return). */
int gptx_comm_mpi_create(comm_engine **out, const comm_setup *s);

#endif
