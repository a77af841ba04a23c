--- venom.data's image folders and image transforms: data.ImageFolder,
-- data.transforms, data.export_image_folder (venom.data loads this file
-- when one of them is first used).
--
--     local T = data.transforms
--     local ds = data.ImageFolder("pets", { transform = {
--       T.Resize(36), T.RandomCrop(32, { padding = 2 }), T.RandomHorizontalFlip(),
--       T.ToTensor(), T.Normalize({ 0.5, 0.5, 0.5 }, { 0.25, 0.25, 0.25 }) } })
--     local loader = data.DataLoader(ds, { batch_size = 64, shuffle = true, workers = 2 })
--     for x, y in loader do ... end   -- x: f32 (64, 3, 32, 32), y: i64 (64) labels 1..#ds.classes
--
-- The layout is torchvision's: root/<class>/<image>, classes sorted by name
-- and numbered from 1 (torchvision numbers them from 0; Lua counts from 1).
-- Geometric transforms work on the u8 (H, W, C) image that venom.image.load
-- gives, ToTensor makes it f32 (C, H, W) in [0, 1], Normalize comes after.
-- Random transforms draw from the engine's seeded RNG (venom.manual_seed),
-- on the calling thread in the order of the batch, so runs repeat and the
-- `workers` count (threads that decode the files) never changes a result.
local venom = require "venom"
local util = require "venom.util"

local core = venom.core
local fail = util.fail
-- errors raised here and in venom.image point at the user's line
util.add_internal_source("[/\\]venom[/\\]data_image%.lua$")
util.add_internal_source("[/\\]venom[/\\]image%.lua$")

local data = {} -- what venom.data gets from this file
local transforms = {}
--- data.transforms: image transforms for data.ImageFolder's `transform`
-- option (torchvision's names). Each is a callable table t(x) → x'.
--   ToTensor()                u8 (H, W, C) → f32 (C, H, W) in [0, 1]
--   Normalize(mean, std)      (x − mean) / std per channel
--   Resize(size)              resampled to {h, w}, or the shorter side to n
--   CenterCrop(size)          the central h × w window
--   RandomCrop(size, opts)    an h × w window at a random position (opts.padding)
--   RandomHorizontalFlip(p)   a mirror image with probability p (0.5)
--   Compose(list)             the transforms of `list`, in order
-- help(data.transforms.Resize) and the others give each one's details.
data.transforms = transforms

-- The files ImageFolder takes (torchvision's list, less the formats stb_image lacks).
local EXTENSIONS = { "png", "jpg", "jpeg", "bmp", "gif", "tga", "pgm", "ppm", "pnm", "psd" }
local is_extension = {}
for _, e in ipairs(EXTENSIONS) do is_extension[e] = true end

-- A transform is a callable table: t(x) → x', with its name for messages.
-- fields: `batchable` (it also takes a batch of images, so ImageFolder may
-- apply it once to the stacked batch), `list` (Compose's transforms).
local function transform(name, fn, fields)
  local t = fields or {}
  t.name = name
  return setmetatable(t, {
    __call = function(_, x) return fn(x) end,
    __tostring = function() return name end,
  })
end

-- Fails unless x is a u8 image (H, W, C) (or a batch of them, (B, H, W, C),
-- where batch is true): the geometric transforms come before ToTensor.
local function check_u8_image(who, x, batch)
  if not venom.is_tensor(x) or x:dtype() ~= "u8" or not (x:dim() == 3 or batch and x:dim() == 4) then
    fail(("%s: expected a u8 image (H, W, C), as venom.image.load gives%s, got %s"):format(who,
      who == "ToTensor" and "" or " (put " .. who .. " before ToTensor)",
      venom.is_tensor(x) and x:dtype() .. " " .. util.format_shape(x) or type(x)))
  end
end

-- size: n (square) or {height, width}, as both torchvision transforms take.
local function check_size(who, size)
  if type(size) == "table" then
    return util.check_int(size[1], "size[1] (height)", { min = 1, who = who }),
        util.check_int(size[2], "size[2] (width)", { min = 1, who = who })
  end
  util.check_int(size, "size", { min = 1, who = who })
  return size, size
end

-- A uniform integer in [0, n) from the engine RNG.
local function draw(n)
  local t = venom.randint(0, n, 1)
  local v = t:item()
  t:free()
  return v
end

--- transforms.ToTensor() → transform: a u8 image (H, W, C) to f32 (C, H, W) with
-- values x/255 in [0, 1] (torchvision's ToTensor); a batch (B, H, W, C) to
-- (B, C, H, W).
function transforms.ToTensor()
  return transform("ToTensor", function(x)
    check_u8_image("ToTensor", x, true)
    return core.image_to_float(x)
  end, { batchable = true })
end

--- transforms.Normalize(mean, std) → transform: f32 (C, H, W) (or a batch
-- (B, C, H, W)) to (x − mean[c]) / std[c] for each channel c; mean and std
-- are lists of C numbers (std > 0).
function transforms.Normalize(mean, std)
  local who = "Normalize"
  if type(mean) ~= "table" or type(std) ~= "table" or #mean == 0 or #mean ~= #std then
    fail(who .. ": expected two lists of one number per channel, mean and std, of the same length")
  end
  for c = 1, #std do
    if type(mean[c]) ~= "number" or type(std[c]) ~= "number" or not (std[c] > 0) then
      fail(("%s: mean[%d] must be a number and std[%d] a number > 0, got %s and %s")
        :format(who, c, c, tostring(mean[c]), tostring(std[c])))
    end
  end
  local m = venom.tensor(mean):view(#mean, 1, 1)
  local s = venom.tensor(std):view(#std, 1, 1)
  return transform(who, function(x)
    if not venom.is_tensor(x) or x:dtype() ~= "f32" or x:dim() < 3 or x:dim() > 4
        or x:size(x:dim() - 2) ~= #mean then
      fail(("%s: expected an f32 image (%d, H, W) or batch (B, %d, H, W) (put ToTensor before "
        .. "it), got %s"):format(who, #mean, #mean,
        venom.is_tensor(x) and x:dtype() .. " " .. util.format_shape(x) or type(x)))
    end
    local d = x:sub(m)
    local y = d:div(s)
    d:free()
    return y
  end, { batchable = true })
end

--- transforms.Resize(size) → transform: resamples a u8 image (venom.image.resize).
-- size = {height, width}: exactly that size; size = n: the shorter side
-- becomes n and the other keeps the aspect ratio (torchvision's rule).
function transforms.Resize(size)
  local who = "Resize"
  local h, w = check_size(who, size)
  local exact = type(size) == "table"
  return transform(who, function(x)
    check_u8_image(who, x)
    local H, W = x:size(1), x:size(2)
    if not exact then
      if H <= W then h, w = size, math.floor(size * W / H) else h, w = math.floor(size * H / W), size end
    end
    return core.image_resize(x, h, w)
  end)
end

-- d / 2 rounded as torchvision's offsets are (Python's round: a half goes
-- to the even neighbour), so both crop the same window.
local function half_even(d)
  local q = math.floor(d / 2)
  return (d % 2 == 1 and q % 2 == 1) and q + 1 or q
end

--- transforms.CenterCrop(size) → transform: the central height × width window of a
-- u8 image (size = n or {height, width}); an image smaller than that is
-- padded with 0 around it.
function transforms.CenterCrop(size)
  local who = "CenterCrop"
  local h, w = check_size(who, size)
  return transform(who, function(x)
    check_u8_image(who, x)
    return core.image_crop(x, half_even(x:size(1) - h) + 1, half_even(x:size(2) - w) + 1, h, w, 0)
  end)
end

--- transforms.RandomCrop(size [, opts]) → transform: a height × width window of a
-- u8 image at a uniformly random position, after padding each side with
-- opts.padding pixels (default 0) of value opts.fill (0..255, default 0);
-- torchvision's RandomCrop with padding_mode "constant".
function transforms.RandomCrop(size, opts)
  local who = "RandomCrop"
  local h, w = check_size(who, size)
  opts = util.check_options(opts, { "padding", "fill" }, who)
  local pad = util.check_int(opts.padding or 0, "padding", { min = 0, who = who })
  local fill = util.check_int(opts.fill or 0, "fill", { min = 0, max = 255, who = who })
  return transform(who, function(x)
    check_u8_image(who, x)
    local H, W = x:size(1) + 2 * pad, x:size(2) + 2 * pad
    if h > H or w > W then
      fail(("%s: the %d x %d window is larger than the padded image, %d x %d (%s padded by %d)")
        :format(who, h, w, H, W, util.format_shape(x), pad))
    end
    local top = draw(H - h + 1)
    local left = draw(W - w + 1)
    return core.image_crop(x, top - pad + 1, left - pad + 1, h, w, fill)
  end)
end

--- transforms.RandomHorizontalFlip([p]) → transform: mirrors a u8 image left ↔
-- right with probability p (default 0.5).
function transforms.RandomHorizontalFlip(p)
  local who = "RandomHorizontalFlip"
  p = p == nil and 0.5 or p
  if type(p) ~= "number" or not (p >= 0 and p <= 1) then
    fail(("%s: p must be a probability in [0, 1], got %s"):format(who, tostring(p)))
  end
  return transform(who, function(x)
    check_u8_image(who, x)
    local u = venom.rand(1)
    local flip = u:item() < p
    u:free()
    return flip and core.image_hflip(x) or x
  end)
end

--- transforms.Compose(list) → transform: applies the transforms of `list` in order
-- (intermediate results are freed at once; the input is left alone).
function transforms.Compose(list)
  if type(list) ~= "table" then fail("Compose: expected a list of transforms, got " .. type(list)) end
  for i, t in ipairs(list) do
    if type(t) ~= "function" and not (type(t) == "table" and getmetatable(t) and getmetatable(t).__call) then
      fail(("Compose: element %d is a %s, expected a transform (a function or data.transforms.*)")
        :format(i, type(t)))
    end
  end
  return transform("Compose", function(x)
    local input = x
    for _, t in ipairs(list) do
      local y = t(x)
      if y ~= x and x ~= input and venom.is_tensor(x) then x:free() end
      x = y
    end
    return x
  end, { list = list })
end

-- ImageFolder ------------------------------------------------------------------

local function list_dir(who, path)
  local ok, names, is_dir = pcall(core.dir_list, path)
  if not ok then fail(("%s: %s"):format(who, util.error_text(names))) end
  return names, is_dir
end

local function extension(name)
  return (name:match("%.([^./]+)$") or ""):lower()
end

local Folder = {}
Folder.__index = Folder

--- data.ImageFolder(root [, opts]) → a data set of the images under
-- root/<class>/: classes are the sub-folders of root sorted by name
-- (bytewise), labelled 1, 2, ... in that order; each class's image files
-- (extensions png, jpg, jpeg, bmp, gif, tga, pgm, ppm, pnm, psd, any case;
-- other files and names starting with "." are left out) sorted by name.
-- opts: transform = a transform or a list of them (data.transforms; a list
--   is Compose'd), channels = 0 (as stored; 1..4 converts, e.g. 3 for RGB).
-- Fields: root, classes (names, by label), class_to_idx (name → label),
-- paths and labels (Lua lists, one per image), n.
-- Methods: ds:size(), ds:get(i) → image, label; ds:get_batch(indices [,
-- workers]) → images stacked along a new first dim, i64 labels (the
-- trailing ToTensor and Normalize of the transforms run once on the
-- stacked batch: the same values as image by image). Hand it to
-- data.DataLoader(ds, {workers = k, ...}) to decode each batch's files on k
-- threads. Errors: no class folders, an empty class (naming it), a file
-- that does not decode (naming it), images that differ in shape after the
-- transforms (naming both files and shapes).
function data.ImageFolder(root, opts)
  local who = "data.ImageFolder"
  if type(root) ~= "string" then
    fail(("%s: root must be a directory path (a string), got %s"):format(who, type(root)))
  end
  opts = util.check_options(opts, { "transform", "channels" }, who)
  local channels = util.check_int(opts.channels or 0, "channels", { min = 0, max = 4, who = who })
  local tf = opts.transform
  if type(tf) == "table" and not getmetatable(tf) then tf = transforms.Compose(tf) end
  if tf ~= nil and type(tf) ~= "function" and not (type(tf) == "table" and getmetatable(tf).__call) then
    fail(("%s: transform must be a transform or a list of them, got %s"):format(who, type(tf)))
  end
  -- The tail of batchable transforms (ToTensor, Normalize) runs once on
  -- the stacked batch, the rest on each image: the same values, fewer ops.
  local list = type(tf) == "table" and tf.list or { tf }
  local cut = #list
  while cut > 0 and type(list[cut]) == "table" and list[cut].batchable do cut = cut - 1 end
  local per_image, per_batch = {}, {}
  for i, t in ipairs(list) do
    if i <= cut then per_image[#per_image + 1] = t else per_batch[#per_batch + 1] = t end
  end
  local names, is_dir = list_dir(who, root)
  local ds = setmetatable({ root = root, classes = {}, class_to_idx = {}, paths = {}, labels = {},
    transform = tf, channels = channels,
    per_image = cut > 0 and transforms.Compose(per_image) or nil,
    per_batch = #per_batch > 0 and transforms.Compose(per_batch) or nil }, Folder)
  for i, name in ipairs(names) do
    if is_dir[i] and name:sub(1, 1) ~= "." then
      ds.classes[#ds.classes + 1] = name
      ds.class_to_idx[name] = #ds.classes
    end
  end
  if #ds.classes == 0 then
    fail(("%s: '%s' holds no class folders; expected the layout root/<class>/<image>, found "
      .. "no sub-folders among its %d entries"):format(who, root, #names))
  end
  for label, class in ipairs(ds.classes) do
    local dir = root .. "/" .. class
    local files, sub = list_dir(who, dir)
    local found = 0
    for i, name in ipairs(files) do
      if not sub[i] and name:sub(1, 1) ~= "." and is_extension[extension(name)] then
        ds.paths[#ds.paths + 1] = dir .. "/" .. name
        ds.labels[#ds.labels + 1] = label
        found = found + 1
      end
    end
    if found == 0 then
      fail(("%s: class folder '%s' holds no image files (extensions %s)")
        :format(who, dir, table.concat(EXTENSIONS, ", ")))
    end
  end
  ds.n = #ds.paths
  return ds
end

--- ds:size() → the number of images.
function Folder.size(self) return self.n end

local function check_index(self, who, i)
  util.check_int(i, "index", { min = 1, max = self.n, who = who })
end

--- ds:get(i) → the i-th image (transformed) and its label.
function Folder.get(self, i)
  check_index(self, "ImageFolder:get", i)
  local img = core.image_load(self.paths[i], self.channels)
  if self.transform then img = self.transform(img) end
  return img, self.labels[i]
end

--- ds:get_batch(indices [, workers]) → images (B, ...) and labels i64 (B):
-- the files of `indices` (a Lua list of positions 1..n) decoded on
-- `workers` threads (0: this one), transformed here in list order,
-- stacked.
function Folder.get_batch(self, indices, workers)
  local who = "ImageFolder:get_batch"
  if type(indices) ~= "table" or #indices == 0 then
    fail(who .. ": indices must be a non-empty list of positions, got " .. type(indices))
  end
  local paths, labels = {}, {}
  for k, i in ipairs(indices) do
    check_index(self, who, i)
    paths[k], labels[k] = self.paths[i], self.labels[i]
  end
  local ok, imgs = pcall(core.image_load_batch, paths, self.channels, workers or 0)
  if not ok then fail(("%s: %s"):format(who, util.error_text(imgs))) end
  local shape
  for k, img in ipairs(imgs) do
    if self.per_image then
      imgs[k] = self.per_image(img)
      if imgs[k] ~= img then img:free() end
    end
    local s = util.format_shape(imgs[k])
    shape = shape or s
    if s ~= shape then
      local hint = imgs[1]:dim() == imgs[k]:dim() and imgs[1]:size(1) == imgs[k]:size(1)
        and imgs[1]:size(2) == imgs[k]:size(2) and "ImageFolder's channels option"
        or "a Resize transform (and a CenterCrop)"
      for _, t in ipairs(imgs) do t:free() end
      fail(("%s: images differ in shape after the transforms: '%s' is %s but '%s' is %s "
        .. "(to stack them, add %s)"):format(who, paths[1], shape, paths[k], s, hint))
    end
  end
  local batch = venom.stack(imgs, 1)
  for _, t in ipairs(imgs) do t:free() end
  if self.per_batch then
    local out = self.per_batch(batch)
    if out ~= batch then batch:free() end
    batch = out
  end
  return batch, venom.tensor(labels, "i64")
end

--- data.export_image_folder(images, labels, root [, opts]) → the number of
-- files written: u8 images (N, H, W) or (N, H, W, C) (e.g. an IDX data
-- set: data.fashion_mnist("test").images) written as lossless PNG files in
-- the ImageFolder layout root/<class>/<k>.png, k the image's position
-- 1..N zero-padded. labels: an integer tensor (N) or Lua list of classes
-- 1..K. opts.classes: the K folder names (default "1".."K" zero-padded so
-- that their sorted order is the label order); they must be in sorted
-- order, so that data.ImageFolder(root) gives back the same labels.
function data.export_image_folder(images, labels, root, opts)
  local who = "data.export_image_folder"
  if not venom.is_tensor(images) or images:dtype() ~= "u8" or (images:dim() ~= 3 and images:dim() ~= 4) then
    fail(("%s: images must be a u8 tensor (N, H, W) or (N, H, W, C), got %s"):format(who,
      venom.is_tensor(images) and images:dtype() .. " " .. util.format_shape(images) or type(images)))
  end
  if type(root) ~= "string" then fail(who .. ": root must be a directory path, got " .. type(root)) end
  opts = util.check_options(opts, { "classes" }, who)
  local n = images:size(1)
  local list = venom.is_tensor(labels) and labels:totable() or labels
  if type(list) ~= "table" or #list ~= n then
    fail(("%s: labels must be a tensor or list of %d class numbers (one per image), got %s")
      :format(who, n, type(list) == "table" and #list .. " values" or type(list)))
  end
  local k = 0
  for i, l in ipairs(list) do
    util.check_int(l, ("labels[%d]"):format(i), { min = 1, who = who })
    k = math.max(k, l)
  end
  local classes = opts.classes
  if classes == nil then
    classes = {}
    for c = 1, k do classes[c] = ("%0" .. #tostring(k) .. "d"):format(c) end
  elseif type(classes) ~= "table" or #classes < k then
    fail(("%s: classes must list at least %d folder names (the largest label)"):format(who, k))
  end
  for c = 1, #classes do
    local name = classes[c]
    if type(name) ~= "string" or name == "" or name:find("/") or name:sub(1, 1) == "." then
      fail(("%s: classes[%d] must be a folder name (no '/', not starting with '.'), got %s")
        :format(who, c, tostring(name)))
    end
    if c > 1 and not (classes[c - 1] < name) then
      fail(("%s: classes must be in sorted order, so ImageFolder numbers them the same: "
        .. "'%s' comes before '%s'"):format(who, classes[c - 1], name))
    end
  end
  local ok, err = pcall(function()
    for c = 1, k do core.make_dir(root .. "/" .. classes[c]) end
    local width = #tostring(n)
    for i = 1, n do
      local img = images:select(1, i)
      core.image_save(("%s/%s/%0" .. width .. "d.png"):format(root, classes[list[i]], i), img)
      img:free()
    end
  end)
  if not ok then fail(("%s: %s"):format(who, util.error_text(err))) end
  return n
end

return data
