# Cython declarations for static.py (pure-Python mode; see greenserve/_accel.py): its classes as
# C structs, so that an answer's dozen attribute reads and its Answer are C field accesses, not
# dictionary and descriptor lookups (perf, 1 KiB files: a static request's user time was 1.07 us
# over hello's, a third of it attribute lookups). The module's constants stay Python globals:
# the tests set REVALIDATE, SMALL_FILE and TARGETS_KEPT.
cimport cython


cdef class OpenFile:
    cdef public int fd
    cdef public Py_ssize_t size
    cdef public object mtime_ns
    cdef public object inode
    cdef public str etag
    cdef public str last_modified
    cdef public object modified
    cdef public Py_ssize_t users
    cdef public bint dropped
    cdef public bytes data


cdef class Resource:
    cdef public str path
    cdef public dict files
    cdef public tuple codings
    cdef public str content_type
    cdef public str cache_control
    cdef public double checked
    cdef public dict plain
    cdef public dict answers
    cdef public OpenFile whole
    cdef public bint dropped


cdef class Answer:
    cdef public str status
    cdef public list headers
    cdef public bytes body
    cdef public OpenFile file
    cdef public Py_ssize_t offset
    cdef public Py_ssize_t length


cdef class Mount:
    cdef public str prefix
    cdef public str root
    cdef public str root_slash


cdef class Target:
    cdef public Mount mount
    cdef public list segments
    cdef public bint trailing
    cdef public tuple key
    cdef public object resource


cdef class Static:
    cdef public list mounts
    cdef public tuple prefixes
    cdef public object max_age
    cdef public bint index
    cdef public bint follow_symlinks
    cdef public Py_ssize_t cache_size
    cdef public dict cache
    cdef public dict targets
    cdef public object stats

    @cython.locals(target=Target, resource=object)
    cpdef Answer answer(self, dict environ, str path)
    @cython.locals(file=OpenFile, plain=tuple, shared=Answer)
    cpdef Answer _file_answer(self, dict environ, str method, Resource resource)
    cpdef _resource(self, Target target)
