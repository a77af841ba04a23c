/* venom/image.h — images through stb_image (decode), stb_image_write
 * (encode) and stb_image_resize, and the directory helpers an image folder
 * (root/<class>/<image>) needs. Reached only through venom.h.
 *
 * An image is a u8 tensor (H, W, C) on the CPU, rows top to bottom, pixels
 * left to right, C interleaved channels: 1 gray, 2 gray + alpha, 3 RGB,
 * 4 RGBA (what stb_image returns). Functions that take an image also take
 * (H, W), read as one channel. */
#ifndef VENOM_H
#error "include <venom.h>, not <venom/image.h>"
#endif
#ifndef VENOM_IMAGE_H
#define VENOM_IMAGE_H

#ifdef __cplusplus
extern "C" {
#endif

/* Largest image, in pixels (H·W), that venom decodes: 2^28 (16384 × 16384).
 * A header that declares more is refused before any pixel memory is taken,
 * so a hostile file cannot ask for gigabytes. */
#define VN_IMAGE_MAX_PIXELS ((int64_t)1 << 28)

/* Decodes the image file at `path` (PNG, JPEG baseline and progressive,
 * BMP, GIF (first frame), TGA, PSD, PNM: whatever stb_image reads; 16-bit
 * PNGs are scaled to 8 bits) into a new u8 tensor (H, W, C). channels = 0
 * keeps the file's channels; 1..4 converts (gray ↔ RGB by stb_image's
 * luma, alpha added as 255 or dropped). For PNG files the CRC-32 of every
 * chunk is checked first (stb_image does not), so a flipped bit is an
 * error rather than a wrong image.
 * Errors, each message naming the file: VN_ERR_ARG (NULL path, channels
 * outside 0..4), VN_ERR_IO (cannot open or read: the system's reason),
 * VN_ERR_FORMAT (not an image, a corrupt or truncated file: stb_image's
 * reason, or the PNG chunk whose CRC or length is wrong; more than
 * VN_IMAGE_MAX_PIXELS pixels), VN_ERR_MEMORY. */
vn_tensor *vn_image_load(const char *path, int channels);

/* vn_image_load of n files on up to `threads` threads (0 or 1: the
 * calling thread only), an OpenMP loop over the files: out[i] gets the image
 * of paths[i]. The results do not depend on `threads`. On failure every
 * out[i] is NULL and the message is that of the first failing file in the
 * list (by index, not by time), so the error is the same for any `threads`.
 * Errors: those of vn_image_load; VN_ERR_ARG (n < 0, NULL arrays). */
vn_status vn_image_load_batch(int n, const char *const *paths, int channels, int threads,
                              vn_tensor **out);

/* Encodes `img` (u8 (H, W) or (H, W, C) with C in 1..4, CPU, any layout) to
 * the file `path`, in the format its extension names (case-insensitive):
 * .png (lossless: vn_image_load gives back the same bytes), .jpg / .jpeg
 * (baseline JPEG at `quality` 1..100; 0 means 90), .bmp, .tga. The file is
 * written under a temporary name in the same directory and renamed over
 * `path`, so a failed save leaves no partial file under that name.
 * Errors: VN_ERR_ARG (NULL, unknown extension, quality outside 0..100),
 * VN_ERR_DTYPE (not u8), VN_ERR_SHAPE (not 2-D/3-D, C outside 1..4, an empty
 * image), VN_ERR_DEVICE (CUDA), VN_ERR_IO (the message names the path and
 * the system's reason). */
vn_status vn_image_save(const char *path, const vn_tensor *img, int quality);

/* A new u8 image of height × width pixels resampled from `img` (u8 (H, W)
 * or (H, W, C), CPU) by stb_image_resize: separable filtering, the
 * Catmull-Rom cubic along a dimension that grows and the Mitchell-Netravali
 * cubic (B = C = 1/3) along one that shrinks or keeps its size, edges
 * clamped, channels independent, values rounded and clamped to 0..255; at
 * the same height and width, a copy. The output has img's number of dims.
 * Errors: VN_ERR_ARG (height or width < 1 or above 2^24), VN_ERR_DTYPE,
 * VN_ERR_SHAPE, VN_ERR_DEVICE, VN_ERR_MEMORY. */
vn_tensor *vn_image_resize(const vn_tensor *img, int64_t height, int64_t width);

/* A new image of height × width pixels cut from `img` (u8 (H, W) or
 * (H, W, C), CPU) at rows top .. top+height−1 and columns left .. left+
 * width−1 (0-based); the window may reach past any edge (top and left may
 * be negative), and pixels outside img are `fill` (0..255): a crop of an
 * image padded with a constant, as torchvision's RandomCrop(padding=p) and
 * CenterCrop of a smaller image do. Errors: VN_ERR_ARG (height or width < 1,
 * fill outside 0..255, a window more than 2^24 pixels from the image),
 * VN_ERR_DTYPE, VN_ERR_SHAPE, VN_ERR_DEVICE, VN_ERR_MEMORY. */
vn_tensor *vn_image_crop(const vn_tensor *img, int64_t top, int64_t left, int64_t height,
                         int64_t width, int fill);

/* A new image with the columns of `img` (u8 (H, W) or (H, W, C), CPU) in
 * reverse order: the mirror image, left ↔ right. Errors: VN_ERR_DTYPE,
 * VN_ERR_SHAPE, VN_ERR_DEVICE, VN_ERR_MEMORY. */
vn_tensor *vn_image_hflip(const vn_tensor *img);

/* torchvision's ToTensor in one pass: u8 images (H, W, C) or a batch
 * (B, H, W, C) (CPU, any layout) to a new f32 tensor (C, H, W) or
 * (B, C, H, W) of x / 255, in [0, 1]; (H, W) gives (1, H, W). Errors:
 * VN_ERR_DTYPE (not u8), VN_ERR_SHAPE (not 2-D to 4-D), VN_ERR_DEVICE,
 * VN_ERR_MEMORY. */
vn_tensor *vn_image_to_float(const vn_tensor *img);

/* The entries of directory `path`, "." and ".." left out, sorted by strcmp
 * (bytewise, as Python's sorted() orders torchvision's class names):
 * *names gets n malloc'ed strings and *is_dir says for each whether it is a
 * directory (following symbolic links). Free with vn_dir_list_free.
 * Errors: VN_ERR_ARG (NULL), VN_ERR_IO (cannot open or read: the message
 * names the path and the system's reason), VN_ERR_MEMORY. */
vn_status vn_dir_list(const char *path, int *n, char ***names, bool **is_dir);
/* Frees what vn_dir_list returned. NULL-safe. */
void vn_dir_list_free(int n, char **names, bool *is_dir);

/* Creates directory `path` and its missing parents (mode 0777 less the
 * umask), as `mkdir -p` does; an existing directory is fine. Errors:
 * VN_ERR_ARG (NULL or empty), VN_ERR_IO (a component exists and is not a
 * directory, or mkdir failed: the message names it and the system's
 * reason). */
vn_status vn_make_dir(const char *path);

#ifdef __cplusplus
}
#endif
#endif
