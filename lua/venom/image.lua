--- venom.image — image files through stb_image (Debian libstb).
--
--     local img = venom.image.load("cat.png")      -- u8 (H, W, C), C = 1, 2, 3 or 4
--     local small = venom.image.resize(img, 32, 32)
--     venom.image.save("small.png", small)          -- PNG is lossless: load gives the same bytes
--
-- An image is a u8 tensor (H, W, C) on the CPU: rows top to bottom, C
-- interleaved channels (1 gray, 2 gray + alpha, 3 RGB, 4 RGBA); (H, W) is
-- read as one channel. Positions are 1-based. Errors name the file and
-- say why (stb_image's reason, a PNG chunk whose CRC is wrong, ...).
local venom = require "venom"

local core = venom.core
local image = {}

--- venom.image.load(path [, channels]) → u8 (H, W, C): decodes a PNG, JPEG,
-- BMP, GIF (first frame), TGA, PSD or PNM file. channels = 0 or nil keeps
-- the file's channels; 1..4 converts (gray ↔ RGB, alpha added or dropped).
-- 16-bit PNGs come back scaled to 8 bits. PNG chunk CRCs are checked, so a
-- damaged file is an error, never a silently wrong image.
function image.load(path, channels) return core.image_load(path, channels) end

--- venom.image.load_batch(paths [, channels [, threads]]) → a list of
-- images, decoded on `threads` threads (default 0: this thread only); the
-- same images, and for a bad file the same error (the first bad file in
-- the list), whatever `threads` is.
function image.load_batch(paths, channels, threads)
  return core.image_load_batch(paths, channels or 0, threads or 0)
end

--- venom.image.save(path, img [, quality]): writes the u8 image (H, W) or
-- (H, W, C) in the format its extension names: .png (lossless), .jpg /
-- .jpeg (quality 1..100, default 90), .bmp, .tga. The file appears under
-- its name only once complete.
function image.save(path, img, quality) return core.image_save(path, img, quality) end

--- venom.image.resize(img, height, width) → a new u8 image resampled by
-- stb_image_resize (Catmull-Rom cubic when growing, Mitchell-Netravali when
-- shrinking; edges clamped).
function image.resize(img, height, width) return core.image_resize(img, height, width) end

--- venom.image.crop(img, top, left, height, width [, fill]) → a new u8
-- image of height × width pixels whose first pixel is img's (top, left)
-- (1-based). The window may reach past the edges (top, left ≤ 0 included);
-- pixels outside the image are `fill` (0..255, default 0).
function image.crop(img, top, left, height, width, fill)
  return core.image_crop(img, top, left, height, width, fill)
end

--- venom.image.hflip(img) → a new u8 image mirrored left ↔ right.
function image.hflip(img) return core.image_hflip(img) end

return image
