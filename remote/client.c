/* remote/client.c: see remote.h (being written). */
#include "remote.h"
