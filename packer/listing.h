/* packer/listing.h - what to pack, in which order, with which labels.
 *
 * The listing fixes the record order of a dataset (and so its bytes): an
 * ImageFolder tree is read in torchvision's order, a list file in its line
 * order. Every regular file found is listed; files that turn out not to be
 * images are skipped later with a reason, never silently. */
#ifndef STOKER_PACKER_LISTING_H
#define STOKER_PACKER_LISTING_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    char *path;    /* as given: relative to pk_listing.root, or absolute */
    int64_t label; /* -1: no label (a file outside any class directory) */
} pk_entry;

typedef enum { PK_LIST_IMAGEFOLDER, PK_LIST_FILE } pk_list_kind;

typedef struct {
    pk_list_kind kind;
    char *root; /* directory the paths are relative to */
    pk_entry *e;
    size_t n;
    char **classes; /* label i is classes[i]; empty for integer labels */
    size_t nclasses;
} pk_listing;

/* Build the listing of INPUT: a directory (ImageFolder: ROOT/CLASS/...; classes
 * are the sorted names of ROOT's subdirectories, files are listed recursively
 * in sorted order, as torchvision's ImageFolder does), or a .csv / .tsv file
 * with a header line naming the columns `path` and `label` (label: an integer,
 * or a class name; class names are numbered in sorted order). Returns 0, or
 * -1 with one line in msg. */
int pk_listing_load(const char *input, pk_listing *out, char *msg, size_t cap);
void pk_listing_free(pk_listing *l);

/* Full path of entry i (malloc'd). */
char *pk_listing_path(const pk_listing *l, size_t i);
/* XXH3-64 over the entries and classes: identifies a listing across runs. */
uint64_t pk_listing_hash(const pk_listing *l);

#endif
