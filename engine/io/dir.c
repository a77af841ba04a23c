/* dir.c — listing and making directories, for image folders
 * (root/<class>/<image>): vn_dir_list gives the sorted entries the class
 * labels are numbered from, vn_make_dir makes the folders an export writes
 * into. */
#include "internal.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

void vn_dir_list_free(int n, char **names, bool *is_dir)
{
    for (int i = 0; names && i < n; i++) free(names[i]);
    free(names);
    free(is_dir);
}

vn_status vn_dir_list(const char *path, int *n, char ***names, bool **is_dir)
{
    if (!path || !n || !names || !is_dir)
        return vn__err(VN_ERR_ARG, "dir_list: path and the three outputs must not be NULL");
    *n = 0, *names = NULL, *is_dir = NULL;
    errno = 0;
    DIR *d = opendir(path);
    if (!d) return vn__err(VN_ERR_IO, "dir_list: cannot open directory '%s': %s", path,
                           strerror(errno));
    int count = 0, cap = 0;
    char **list = NULL;
    bool oom = false;
    struct dirent *e;
    for (errno = 0; !oom && (e = readdir(d)); errno = 0) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        if (count == cap) {
            cap = cap ? 2 * cap : 64;
            char **grown = realloc(list, (size_t)cap * sizeof *list);
            if (grown) list = grown;
            else oom = true;
        }
        if (!oom && !(list[count++] = strdup(e->d_name))) oom = true;
    }
    vn_status s = VN_OK;
    if (oom) s = vn__err(VN_ERR_MEMORY, "dir_list: out of memory listing '%s'", path);
    else if (errno) s = vn__err(VN_ERR_IO, "dir_list: cannot read directory '%s': %s", path,
                                strerror(errno));
    closedir(d);
    bool *dirs = s == VN_OK ? calloc((size_t)count + 1, sizeof *dirs) : NULL;
    if (s == VN_OK && !dirs)
        s = vn__err(VN_ERR_MEMORY, "dir_list: out of memory listing '%s'", path);
    if (s != VN_OK) {
        vn_dir_list_free(count, list, dirs);
        return s;
    }
    if (count) qsort(list, (size_t)count, sizeof *list, by_name);
    /* stat (not d_type, which some file systems leave unknown) follows
     * links, so a linked class folder counts as a folder. */
    size_t plen = strlen(path);
    for (int i = 0; i < count; i++) {
        char *full = malloc(plen + strlen(list[i]) + 2);
        struct stat st;
        if (!full) {
            vn_dir_list_free(count, list, dirs);
            return vn__err(VN_ERR_MEMORY, "dir_list: out of memory listing '%s'", path);
        }
        sprintf(full, "%s/%s", path, list[i]);
        dirs[i] = stat(full, &st) == 0 && S_ISDIR(st.st_mode);
        free(full);
    }
    *n = count, *names = list, *is_dir = dirs;
    return VN_OK;
}

/* mkdir of one path; an existing directory is success. */
static vn_status make_one(const char *path)
{
    struct stat st;
    if (mkdir(path, 0777) == 0) return VN_OK;
    int err = errno;
    if (stat(path, &st) == 0) {
        if (S_ISDIR(st.st_mode)) return VN_OK;
        return vn__err(VN_ERR_IO, "make_dir: '%s' exists and is not a directory", path);
    }
    return vn__err(VN_ERR_IO, "make_dir: cannot create '%s': %s", path, strerror(err));
}

vn_status vn_make_dir(const char *path)
{
    if (!path || !*path) return vn__err(VN_ERR_ARG, "make_dir: path is NULL or empty");
    char *p = strdup(path);
    if (!p) return vn__err(VN_ERR_MEMORY, "make_dir: out of memory");
    vn_status s = VN_OK;
    /* Each parent in turn, from the first component after a leading '/'. */
    for (char *q = p + 1; s == VN_OK && *q; q++) {
        if (*q != '/') continue;
        *q = 0;
        s = make_one(p);
        *q = '/';
    }
    if (s == VN_OK) s = make_one(p);
    free(p);
    return s;
}
