/* remote/s3.c: see remote.h (being written). */
#include "remote.h"
