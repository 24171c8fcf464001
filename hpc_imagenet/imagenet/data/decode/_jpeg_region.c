/* Region-of-interest JPEG decoding for the fast backend (jpeg.py, fast.py beside this file).
 *
 * decode_region(data, top, left, height, width) -> bytearray of height x width x 3 RGB bytes,
 * the same pixels as a full decode cropped to that box, or None for CMYK/YCCK images.
 *
 * Why our own C: a RandomResizedCrop box covers about half of an ImageNet photo, and libjpeg-turbo
 * can skip the colour conversion, upsampling and inverse DCT outside it (jpeg_skip_scanlines above
 * the box, jpeg_crop_scanline beside it, stopping after its last row). No maintained Python library
 * exposes that: simplejpeg, Pillow, torchvision and OpenCV decode whole images (or DCT-scale them),
 * and PyTurboJPEG's region decoding needs TurboJPEG 3, which Debian 12 and most clusters lack. This
 * file calls the system libjpeg-turbo (libjpeg-dev) and nothing else; setup.py builds it where a C
 * compiler and those headers exist, and the backend decodes without it elsewhere.
 *
 * Exactness: libjpeg-turbo's "fancy" chroma upsampling treats a cropped region's side edges as image
 * edges, so columns next to them would differ from a full decode. The region decoded is therefore
 * widened by one iMCU on each side (clamped to the image) and the box cut from its middle.
 * Warnings (corrupt data) are errors here: the caller then falls back to a decoder that reports
 * them its own way.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>

enum { DECODED = 0, FAILED = 1, NOT_RGB = 2 };

typedef struct {
    struct jpeg_error_mgr pub;
    jmp_buf jump;
    char *message; /* the caller's JMSG_LENGTH_MAX buffer */
} ErrorManager;

static void raise_error(j_common_ptr cinfo) {
    ErrorManager *err = (ErrorManager *)cinfo->err;
    (*cinfo->err->format_message)(cinfo, err->message);
    longjmp(err->jump, 1);
}

static void raise_on_warning(j_common_ptr cinfo, int level) {
    if (level < 0) raise_error(cinfo); /* level -1: a warning (corrupt data); others are trace output */
}

/* The widened column range [*x0, *x1) around the box: one iMCU either side, inside the image. */
static void widened_columns(j_decompress_ptr cinfo, int left, int width, JDIMENSION *x0, JDIMENSION *x1) {
    int margin = cinfo->max_h_samp_factor * DCTSIZE;
    int start = left - margin, end = left + width + margin;
    *x0 = (JDIMENSION)(start < 0 ? 0 : start);
    *x1 = (JDIMENSION)(end > (int)cinfo->output_width ? (int)cinfo->output_width : end);
}

/* Pure C, run without the GIL: decodes the box of SRC into DST (height * width * 3 bytes). */
static int decode_into(const unsigned char *src, size_t size, int top, int left, int height, int width,
                       unsigned char *dst, char *message) {
    struct jpeg_decompress_struct cinfo;
    ErrorManager err;
    JSAMPLE *volatile row = NULL; /* volatile: assigned after setjmp, freed after a longjmp */
    cinfo.err = jpeg_std_error(&err.pub);
    err.pub.error_exit = raise_error;
    err.pub.emit_message = raise_on_warning;
    err.message = message;
    jpeg_create_decompress(&cinfo);
    if (setjmp(err.jump)) {
        free(row);
        jpeg_destroy_decompress(&cinfo);
        return FAILED;
    }
    jpeg_mem_src(&cinfo, src, (unsigned long)size);
    jpeg_read_header(&cinfo, TRUE);
    if (cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK) {
        jpeg_destroy_decompress(&cinfo);
        return NOT_RGB; /* libjpeg cannot convert these to RGB */
    }
    if (top < 0 || left < 0 || height <= 0 || width <= 0 || (unsigned)(top + height) > cinfo.image_height ||
        (unsigned)(left + width) > cinfo.image_width) {
        snprintf(message, JMSG_LENGTH_MAX, "box (top %d, left %d, height %d, width %d) is outside the %ux%u image",
                 top, left, height, width, cinfo.image_width, cinfo.image_height);
        jpeg_destroy_decompress(&cinfo);
        return FAILED;
    }
    cinfo.out_color_space = JCS_RGB;
    jpeg_start_decompress(&cinfo);
    JDIMENSION x0, x1;
    widened_columns(&cinfo, left, width, &x0, &x1);
    JDIMENSION region_width = x1 - x0;
    jpeg_crop_scanline(&cinfo, &x0, &region_width); /* may move x0 left, to an iMCU boundary */
    row = (JSAMPLE *)malloc((size_t)cinfo.output_width * 3);
    if (row == NULL) {
        jpeg_destroy_decompress(&cinfo);
        snprintf(message, JMSG_LENGTH_MAX, "out of memory");
        return FAILED;
    }
    if (top > 0 && jpeg_skip_scanlines(&cinfo, (JDIMENSION)top) != (JDIMENSION)top) raise_error((j_common_ptr)&cinfo);
    size_t shift = (size_t)(left - (int)x0) * 3, stride = (size_t)width * 3;
    for (int r = 0; r < height; r++) {
        JSAMPROW rows[1] = {row};
        if (jpeg_read_scanlines(&cinfo, rows, 1) != 1) raise_error((j_common_ptr)&cinfo);
        memcpy(dst + (size_t)r * stride, row + shift, stride);
    }
    free(row);
    row = NULL;
    jpeg_abort_decompress(&cinfo); /* the rows below the box are never decoded */
    jpeg_destroy_decompress(&cinfo);
    return DECODED;
}

static PyObject *decode_region(PyObject *self, PyObject *args) {
    Py_buffer data;
    int top, left, height, width;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*iiii", &data, &top, &left, &height, &width)) return NULL;
    if (height <= 0 || width <= 0) {
        PyBuffer_Release(&data);
        return PyErr_Format(PyExc_ValueError, "box height and width must be positive, got %d x %d", height, width);
    }
    PyObject *out = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)height * width * 3);
    if (out == NULL) {
        PyBuffer_Release(&data);
        return NULL;
    }
    char message[JMSG_LENGTH_MAX];
    unsigned char *dst = (unsigned char *)PyByteArray_AS_STRING(out);
    int status;
    Py_BEGIN_ALLOW_THREADS
    status = decode_into((const unsigned char *)data.buf, (size_t)data.len, top, left, height, width, dst, message);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&data);
    if (status == DECODED) return out;
    Py_DECREF(out);
    if (status == NOT_RGB) Py_RETURN_NONE;
    return PyErr_Format(PyExc_ValueError, "%s", message);
}

static PyMethodDef methods[] = {
    {"decode_region", decode_region, METH_VARARGS,
     "decode_region(data, top, left, height, width) -> bytearray (height x width x 3 RGB), or None for CMYK"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    .m_base = PyModuleDef_HEAD_INIT,
    .m_name = "_jpeg_region",
    .m_doc = "libjpeg-turbo region-of-interest decoding (see _jpeg_region.c)",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__jpeg_region(void) { return PyModule_Create(&module); }
