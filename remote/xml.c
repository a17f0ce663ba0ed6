/* remote/xml.c: see remote.h (being written). */
#include "remote.h"
