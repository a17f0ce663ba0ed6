/* remote/cache.c: see remote.h (being written). */
#include "remote.h"
