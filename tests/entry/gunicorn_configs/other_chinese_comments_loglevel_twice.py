# Written for greenserve's corpus; stands for the gunicorn configuration of yino/nlp-py (gunicorn.conf.py): comments in Chinese, loglevel set twice, a bare string at module level, logging imports never used, gevent with threads, workers from the CPUs, access_log_format with %(p)s and %(L)s.
import logging
import logging.handlers
import multiprocessing
from logging.handlers import RotatingFileHandler

bind = "0.0.0.0:8001"  # 监听地址与端口
backlog = 256  # 等待连接的队列长度
timeout = 120  # 请求超时（秒）
worker_class = "gevent"  # 协程模式
workers = multiprocessing.cpu_count() + 1  # 工作进程数
threads = 4  # 每个进程的线程数
loglevel = "debug"  # 先写了调试级别……
access_log_format = '%(p)s %(h)s %(t)s "%(r)s" %(s)s %(L)s %(b)s'  # 访问日志格式
loglevel = "info"  # ……后面又改成信息级别
errorlog = "/srv/nlp/logs/error.log"
accesslog = "/srv/nlp/logs/access.log"
"""
访问日志格式里的字段：
p  进程号
h  客户端地址
t  请求时间
r  请求行
s  状态码
L  耗时（秒，带小数）
b  响应长度
"""
